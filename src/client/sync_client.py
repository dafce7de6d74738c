"""``Client``: the REST API from blocking code, with typed results and errors."""

import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Self, TypeVar

import httpx

from jobledger.client import calls
from jobledger.client.calls import Call, Id, ListedT, PagedT, Payload, RunId, RunOptions
from jobledger.client.errors import NotVisibleYetError
from jobledger.client.transport import RETRIED_ERRORS, Connection, answered
from jobledger.client.workflows import Workflows
from jobledger.declarations import HandlerDeclaration
from jobledger.domain.policies import DEFAULT_PRIORITY
from jobledger.schemas.events import EventOut
from jobledger.schemas.executions import (
    BulkDiscardIn,
    BulkReport,
    BulkRequeueIn,
    BulkRunsIn,
    ExecutionDetail,
    ExecutionRef,
    UniqueIn,
)
from jobledger.schemas.handlers import HandlerOut
from jobledger.schemas.jobs import (
    ApplyOut,
    BackfillReport,
    DependenciesOut,
    JobIn,
    JobOut,
    JobPatch,
    LimitsIn,
    ManagedJobIn,
    PreviewOut,
    RetryIn,
    ScheduleIn,
)
from jobledger.schemas.limits import LimitList, LimitOut, LimitStateOut
from jobledger.schemas.notifications import (
    NamedRuleIn,
    NotificationList,
    NotificationRuleIn,
    NotificationRuleList,
    NotificationRuleOut,
    NotificationRuleStateOut,
    NotificationsApplyOut,
    NotificationTestOut,
)
from jobledger.schemas.queues import DrainReport, QueueList, QueueStateOut
from jobledger.schemas.rows import DeadLetterGroup, ExecutionRow, JobRow, Page, WorkflowRow
from jobledger.schemas.system import Readiness

T = TypeVar("T")


class Client:
    """A client of one jobledger API: ``Client(url, token)``, or ``Client()`` to read
    ``JOBLEDGER_URL`` and ``JOBLEDGER_TOKEN``. Close it (or use ``with``) when done.

    Requests that fail with a 503 or a broken connection are sent again with back-off
    (``retries``); every POST carries an Idempotency-Key, the same on each retry, so a
    retried enqueue runs once. A refusal raises a ``JobledgerError`` subclass with the
    API's message, field and fix. Workflows (DAGs of steps) are under ``workflows``:
    ``client.workflows.create``, ``.get``, ``.wait``, ``.cancel``, ``.history``.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.connection = Connection.of(
            url, token, timeout=timeout, retries=retries, backoff=backoff
        )
        self._http = httpx.Client(**self.connection.client_options(), transport=transport)
        self.workflows = Workflows(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, call: Call[T]) -> T:
        """Send ``call``, trying again after a 503 or a broken connection."""
        connection = self.connection
        for attempt in connection.retrying.attempts():
            try:
                response = self._http.request(**connection.request(call))
            except RETRIED_ERRORS as error:
                pause = connection.after_error(attempt, error)
            else:
                answer_pause = connection.after_answer(attempt, call, response)
                if answer_pause is None:
                    return answered(call, response)
                pause = answer_pause
            time.sleep(pause)
        raise AssertionError  # pragma: no cover (the last attempt returns or raises)

    def iter_pages(self, call: Call[PagedT]) -> Iterator[PagedT]:
        """Every page of a list call (``calls.queues()``, ...), along its cursor."""
        while True:
            page = self.send(call)
            yield page
            if page.next_cursor is None:
                return
            call = call.after(page.next_cursor)

    def _follow(self, call: Call[ListedT]) -> Iterator[Any]:
        for page in self.iter_pages(call):
            yield from page.items

    # ---- jobs --------------------------------------------------------------------------

    def create_job(self, job: JobIn, *, idempotency_key: str | None = None) -> JobOut:
        """Create a job; the same ``idempotency_key`` returns the same job."""
        return self.send(calls.create_job(job, idempotency_key))

    def get_job(self, job_id: Id, *, as_of: datetime | int | None = None) -> JobOut:
        """The job now, or as it was at a time or a version (``as_of``)."""
        return self.send(calls.get_job(job_id, as_of))

    def list_jobs(self, *, limit: int = 50, cursor: str | None = None, **filters: object) -> Page:
        """One page of jobs (items are ``JobRow``); filters: status, handler, queue,
        search, source."""
        return self.send(calls.list_jobs(limit, cursor, **filters))

    def iter_jobs(self, *, page_size: int = 200, **filters: object) -> Iterator[JobRow]:
        """Every job that matches, page by page along the cursor."""
        return self._follow(calls.list_jobs(page_size, None, **filters))

    def update_job(
        self, job_id: Id, patch: JobPatch | Mapping[str, Any], *, override: bool = False
    ) -> JobOut:
        """Change some fields of a job; one that code manages needs ``override``."""
        return self.send(calls.update_job(job_id, patch, override))

    def pause_job(self, job_id: Id, *, reason: str = "") -> JobOut:
        return self.send(calls.pause_job(job_id, reason))

    def resume_job(self, job_id: Id) -> JobOut:
        return self.send(calls.resume_job(job_id))

    def delete_job(self, job_id: Id, *, override: bool = False) -> JobOut:
        """Delete a job (its history stays); one that code manages needs ``override``."""
        return self.send(calls.delete_job(job_id, override))

    def trigger_job(
        self, job_id: Id, *, idempotency_key: str | None = None, unique: UniqueIn | None = None
    ) -> ExecutionRef:
        """Run a job now; the same ``idempotency_key`` returns the same run. With
        ``unique``, a run holding the key is returned instead, marked ``duplicate``."""
        return self.send(calls.trigger_job(job_id, idempotency_key, unique))

    def job_history(self, job_id: Id) -> list[EventOut]:
        """Every event of the job, oldest first (read a page at a time)."""
        return list(self._follow(calls.job_history(job_id)))

    def job_executions(
        self, job_id: Id, *, limit: int = 50, cursor: str | None = None, status: str | None = None
    ) -> Page:
        return self.send(calls.job_executions(job_id, limit, cursor, status))

    def preview_job(self, job_id: Id, *, count: int = 10) -> PreviewOut:
        """The job's next fire times."""
        return self.send(calls.preview_job(job_id, count))

    def preview_schedule(
        self, schedule: ScheduleIn, *, count: int = 10, after: datetime | None = None
    ) -> PreviewOut:
        """The fire times of a schedule, before it is saved."""
        return self.send(calls.preview_schedule(schedule, count, after))

    def apply(
        self,
        jobs: list[ManagedJobIn],
        *,
        prune: bool = False,
        dry_run: bool = False,
        scope: str | None = None,
    ) -> ApplyOut:
        """Apply the whole set of jobs code declares in ``scope``, atomically; the plan
        it followed. ``prune`` deletes only the managed jobs of that scope."""
        return self.send(calls.apply(jobs, prune, dry_run, scope))

    def handlers(self) -> list[HandlerOut]:
        """The handlers the workers run, with the payload schema each declares."""
        return list(self._follow(calls.handlers()))

    def job_dependencies(self, job_id: Id) -> DependenciesOut:
        """The jobs this one waits for (``depends_on``), and those that wait for it."""
        return self.send(calls.job_dependencies(job_id))

    def backfill_job(
        self,
        job_id: Id,
        *,
        start: datetime,
        end: datetime,
        overlap: str = "allow",
        limit: int = 1000,
        reason: str = "",
        dry_run: bool = False,
    ) -> BackfillReport:
        """Fire the job's occurrences in ``[start, end]`` that never fired (at most
        ``limit``; ``overlap``: allow, buffer_all or skip); ``dry_run`` only counts. A
        second backfill of the same window fires nothing."""
        body = calls.backfill_body(
            start, end, overlap=overlap, limit=limit, reason=reason, dry_run=dry_run
        )
        return self.send(calls.backfill_job(job_id, body))

    # ---- executions --------------------------------------------------------------------

    def enqueue(
        self,
        handler: str | HandlerDeclaration[..., Any],
        payload: Payload = None,
        *,
        queue: str = "default",
        priority: int = DEFAULT_PRIORITY,
        run_at: datetime | None = None,
        delay: float | None = None,
        timeout_seconds: float | None = None,
        retry: RetryIn | None = None,
        idempotency_key: str | None = None,
        unique: UniqueIn | None = None,
        limits: LimitsIn | Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> ExecutionRef:
        """Run ``handler`` (a name or the declared function) with ``payload`` (a dict or
        a Struct), now, at ``run_at`` or after ``delay`` seconds. The same
        ``idempotency_key`` returns the first run; without one a key is made, so a
        retry of this call runs it once. ``timeout_seconds`` bounds one attempt.
        With ``unique``, a run holding the same key is returned instead, marked
        ``duplicate`` (after replacing or debouncing it, if asked). ``limits`` (a
        ``LimitsIn`` or a mapping of its fields) makes it wait for concurrency or rate
        limits before it starts. A run not started by ``expires_at`` is discarded unrun."""
        options = RunOptions(
            queue, priority, run_at, delay, timeout_seconds, retry, unique, limits, expires_at
        )
        body = calls.run_body(handler, payload, options)
        return self.send(calls.enqueue(body, idempotency_key))

    def enqueue_many(
        self,
        handler: str | HandlerDeclaration[..., Any],
        payloads: Iterable[Payload],
        *,
        queue: str = "default",
        priority: int = DEFAULT_PRIORITY,
        run_at: datetime | None = None,
        delay: float | None = None,
        timeout_seconds: float | None = None,
        retry: RetryIn | None = None,
        idempotency_key: str | None = None,
        limits: LimitsIn | Mapping[str, Any] | None = None,
    ) -> list[ExecutionRef]:
        """Run ``handler`` once per payload, in batches of up to 1,000 runs a request
        (each batch in one transaction: all its runs or, if one is refused, none). The
        runs come back in the payloads' order; the same ``idempotency_key`` returns
        them instead of making more. ``limits`` applies to each run, as in ``enqueue``."""
        options = RunOptions(queue, priority, run_at, delay, timeout_seconds, retry, limits=limits)
        refs: list[ExecutionRef] = []
        for call in calls.enqueue_batches(handler, payloads, options, idempotency_key):
            refs += calls.batch_refs(self.send(call))
        return refs

    def get_execution(self, execution_id: RunId, *, wait: float | None = None) -> ExecutionDetail:
        """The run and its attempts; with ``wait``, once it finishes or after that many
        seconds (at most 60)."""
        return self.send(calls.get_execution(execution_id, wait))

    def list_executions(
        self, *, limit: int = 50, cursor: str | None = None, **filters: object
    ) -> Page:
        """One page of runs (items are ``ExecutionRow``); filters: status, job_id,
        queue, handler, since, until."""
        return self.send(calls.list_executions(limit, cursor, **filters))

    def iter_executions(self, *, page_size: int = 200, **filters: object) -> Iterator[ExecutionRow]:
        """Every run that matches, page by page along the cursor."""
        return self._follow(calls.list_executions(page_size, None, **filters))

    def cancel(self, execution_id: RunId, *, reason: str = "") -> ExecutionRef:
        return self.send(calls.cancel(execution_id, reason))

    def cancel_many(self, selection: BulkRunsIn) -> BulkReport:
        """Cancel the runs named in ``ids``, or every run the list's filters match, that
        have not ended (``dry_run`` only counts)."""
        return self.send(calls.cancel_many(selection))

    def retry_now(self, selection: BulkRunsIn) -> BulkReport:
        """Make the selected pending runs that wait for a later time (a back-off, a
        snooze, a deferral, their run_at) due at once (``dry_run`` only counts)."""
        return self.send(calls.retry_now(selection))

    def execution_history(self, execution_id: RunId) -> list[EventOut]:
        return list(self._follow(calls.execution_history(execution_id)))

    def wait(self, execution_id: RunId, timeout: float | None = None) -> dict[str, Any]:
        """The result of the run once it completes. Raises ExecutionFailedError (with
        its last error) if it was dead-lettered, ExecutionCancelledError if cancelled or
        discarded, WaitTimedOutError after ``timeout`` seconds (None: no limit)."""
        waiting = calls.Waiting(calls.id_of(execution_id), timeout, time.monotonic)
        while True:
            try:
                detail = self.send(waiting.next())
            except NotVisibleYetError:
                continue  # the server waited for it to show; ask again
            result = waiting.seen(detail)
            if result is not None:
                return result

    # ---- workflows (create, get, wait, cancel: ``self.workflows``) ---------------------

    def list_workflows(
        self, *, limit: int = 50, cursor: str | None = None, **filters: object
    ) -> Page:
        """One page of workflows, the latest started first (items are ``WorkflowRow``,
        with their steps counted by state); filters: status, name, since, until."""
        return self.send(calls.list_workflows(limit, cursor, **filters))

    def iter_workflows(self, *, page_size: int = 200, **filters: object) -> Iterator[WorkflowRow]:
        """Every workflow that matches, page by page along the cursor."""
        return self._follow(calls.list_workflows(page_size, None, **filters))

    # ---- dead letters ------------------------------------------------------------------

    def list_dead_letters(
        self, *, limit: int = 50, cursor: str | None = None, **filters: object
    ) -> Page:
        """One page of dead letters; filters: queue, handler, job_id, error_contains."""
        return self.send(calls.list_dead_letters(limit, cursor, **filters))

    def iter_dead_letters(
        self, *, page_size: int = 200, **filters: object
    ) -> Iterator[ExecutionRow]:
        return self._follow(calls.list_dead_letters(page_size, None, **filters))

    def dead_letter_groups(self, *, limit: int = 100) -> list[DeadLetterGroup]:
        """Dead letters grouped by job, handler and error, the largest group first."""
        return self.send(calls.dead_letter_groups(limit))

    def requeue(self, execution_id: RunId, *, reason: str = "") -> BulkReport:
        """Give a dead letter a fresh attempt budget."""
        return self.send(calls.requeue(execution_id, reason))

    def requeue_matching(self, selection: BulkRequeueIn) -> BulkReport:
        """Requeue every dead letter a filter matches (``dry_run`` only counts)."""
        return self.send(calls.requeue_matching(selection))

    def discard_matching(self, selection: BulkDiscardIn) -> BulkReport:
        """Give up for good on every dead letter a filter matches (a group: its job,
        handler and error); ``dry_run`` only counts."""
        return self.send(calls.discard_matching(selection))

    def discard(self, execution_id: RunId, *, reason: str = "") -> BulkReport:
        """Give up on a dead letter for good; its history stays."""
        return self.send(calls.discard(execution_id, reason))

    # ---- queues ------------------------------------------------------------------------

    def queues(self, *, limit: int | None = None, cursor: str | None = None) -> QueueList:
        """Every queue by name with its entries by state, and whether it is paused (by
        whom, since when, why); with ``limit`` or ``cursor``, one page of them (follow
        its ``next_cursor``)."""
        if limit is not None or cursor is not None:
            return self.send(calls.queues(limit or calls.PAGE_MAX, cursor))
        return calls.whole_queues(list(self.iter_pages(calls.queues())))

    def pause_queue(self, name: str, reason: str) -> QueueStateOut:
        """Stop leasing from the queue (running work finishes); ``changed`` is False if
        it was paused already."""
        return self.send(calls.pause_queue(name, reason))

    def resume_queue(self, name: str) -> QueueStateOut:
        """Lease from the queue again; ``changed`` is False if it was running."""
        return self.send(calls.resume_queue(name))

    def drain_queue(self, name: str, reason: str, *, dry_run: bool = False) -> DrainReport:
        """Cancel the queue's pending runs (running ones finish); ``dry_run`` lists the
        runs it would cancel and cancels none."""
        return self.send(calls.drain_queue(name, reason, dry_run=dry_run))

    # ---- notifications -----------------------------------------------------------------

    def notifications(self, *, limit: int = 50, cursor: str | None = None) -> NotificationList:
        """The notifications the rules raised, the latest first, with how each one's
        delivery went (follow ``next_cursor`` for older ones)."""
        return self.send(calls.notifications(limit, cursor))

    def notification_rules(self) -> NotificationRuleList:
        """Every notification rule, by name."""
        return self.send(calls.notification_rules())

    def notification_rule(self, name: str) -> NotificationRuleOut:
        """One notification rule."""
        return self.send(calls.notification_rule(name))

    def save_notification_rule(
        self, name: str, rule: NotificationRuleIn | Mapping[str, Any]
    ) -> NotificationRuleStateOut:
        """Make the rule ``name`` or replace it whole, e.g. ``{"on": "dead_letter",
        "job": "billing", "channel": {"kind": "slack", "url": "https://hooks..."}}``."""
        return self.send(calls.save_notification_rule(name, rule))

    def delete_notification_rule(self, name: str) -> NotificationRuleStateOut:
        """Delete the rule; notifications already raised are still delivered."""
        return self.send(calls.delete_notification_rule(name))

    def test_notification_rule(self, name: str) -> NotificationTestOut:
        """Send a test notification through the rule's channel now; the run that
        sends it is ``execution_id``."""
        return self.send(calls.test_notification_rule(name))

    def apply_notifications(
        self, rules: list[NamedRuleIn], *, scope: str, prune: bool = False, dry_run: bool = False
    ) -> NotificationsApplyOut:
        """Apply a set of rules as ``scope``'s, in one save; ``prune`` deletes the
        scope's rules no longer given; ``dry_run`` only plans."""
        return self.send(
            calls.apply_notifications(rules, scope=scope, prune=prune, dry_run=dry_run)
        )

    # ---- limits ------------------------------------------------------------------------

    def limits(self, *, limit: int | None = None, cursor: str | None = None) -> LimitList:
        """The named limits by name with their use, and every limit key in use or
        waited for, per queue; with ``limit`` or ``cursor``, one page of the named limits
        (follow its ``next_cursor``)."""
        if limit is not None or cursor is not None:
            return self.send(calls.limits(limit or calls.PAGE_MAX, cursor))
        return calls.whole_limits(list(self.iter_pages(calls.limits())))

    def limit(self, name: str) -> LimitOut:
        """One named limit and its use."""
        return self.send(calls.get_limit(name))

    def create_limit(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per_seconds: float | None = None,
    ) -> LimitStateOut:
        """Create the named limit ``name``: at most ``concurrency`` runs naming it at
        once, at most ``rate`` starts per ``per_seconds``, or both. Runs already waiting
        are held to it too; ConflictError if it exists."""
        return self.send(
            calls.create_limit(name, concurrency=concurrency, rate=rate, per_seconds=per_seconds)
        )

    def change_limit(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per_seconds: float | None = None,
    ) -> LimitStateOut:
        """Give the named limit new values (they replace all of its old ones);
        ``changed`` is False when they were the same."""
        return self.send(
            calls.change_limit(name, concurrency=concurrency, rate=rate, per_seconds=per_seconds)
        )

    # ---- system ------------------------------------------------------------------------

    def health(self) -> Readiness:
        """Whether the server and its stores are ready (``ready`` False: not yet)."""
        return self.send(calls.health())
