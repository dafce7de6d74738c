"""The notifier: the scheduler leader's follower that turns what the log records into
notifications, by the rules (``domain/notifications.py``, ADR 108).

It reads the few events a rule can be about (a dead letter, a deferral because a
breaker is open, a failed workflow), after its own position, and every
``backlog_every`` it looks at the queues' backlogs. Each notification is a run of
``notify.send`` whose id follows from the rule, the subject and the cause, so reading a
page again (after a crash, under a new leader, or with two leaders at once) collides
instead of telling twice; the position moves once the page's runs are saved.

A rule about runs in a row reads the job's last runs from the read models, so a page
with such a dead letter waits until the read models hold that run's end.
"""

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import structlog

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.errors import AlreadyExistsError, ConflictError, NotFoundError
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.notifications import (
    HANDLER,
    RULES_ID,
    Delivery,
    NotificationRule,
    NotificationRules,
    NotifyOn,
    cause_of,
    delivery_key,
    delivery_run,
)
from jobledger.domain.workflow import Workflow
from jobledger.infra.leadership import Leadership
from jobledger.infra.metrics import Metrics
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow
from jobledger.projections.database import Database
from jobledger.projections.log.positions import Positions
from jobledger.projections.log.reader import Follower, LogReader, StepHealth, Wakeup
from jobledger.projections.log.streams import load_many
from jobledger.projections.quarantine import NOTIFIER_FOLLOWER, Isolation
from jobledger.projections.queue.backend import QueueBackend
from jobledger.projections.read_models.queries import ReadModelQueries

log = structlog.get_logger(__name__)

POSITION = "notifications"
TOPICS = tuple(
    sorted({Execution.DeadLettered.TOPIC, Execution.Deferred.TOPIC, Workflow.Failed.TOPIC})
)
CIRCUIT_OPEN = ": circuit open"  # how a deferral's reason names its handler's breaker
BACKLOG_EVERY = timedelta(seconds=15)
# The listener wakes it as the log moves; the poll is the fallback, and the backlog's beat.
NOTIFIER_POLL_SECONDS = 1.0
COALESCE_SECONDS = 0.25
TEXT_CHARS = 500
KEYS_KEPT = 10_000  # notifications this notifier remembers making (saves it a collision)


@dataclass
class NotifierStats:
    pages: int = 0
    sent: int = 0
    repeated: int = 0  # notifications made already (a page read again)
    waited: int = 0  # pages that waited for the read models


@dataclass
class _Notice:
    """A notification to make: the rule's and what it is about."""

    rule: str
    subject: str
    cause: str
    delivery: Delivery


@dataclass
class _Page:
    """What one page's notifications need, loaded once each."""

    runs: dict[UUID, Execution] = field(default_factory=dict)
    job_names: dict[UUID, str] = field(default_factory=dict)


class Notifier:
    """Makes the notifications the rules ask for (see the module docstring)."""

    def __init__(
        self,
        ledger: Ledger,
        database: Database,
        leadership: Leadership,
        *,
        positions: Positions,
        queries: ReadModelQueries,
        backend: QueueBackend,
        page_size: int = 500,
        now: Clock = utc_now,
        isolation: Isolation | None = None,
        backlog_every: timedelta = BACKLOG_EVERY,
        metrics: Metrics | None = None,
    ) -> None:
        self.ledger = ledger
        self._metrics = metrics
        self.leadership = leadership
        self.stats = NotifierStats()
        self._database = database
        self._position = positions.of(POSITION)
        self._queries = queries
        self._backend = backend
        self._reader = LogReader(ledger, page_size, topics=TOPICS)
        self._isolation = isolation or Isolation(NOTIFIER_FOLLOWER, hold=False)
        self._now = now
        self._backlog_every = backlog_every
        self._next_backlog: datetime | None = None
        self._rules: NotificationRules | None = None
        self._made: OrderedDict[str, None] = OrderedDict()

    def position(self) -> int:
        return self._position.get()

    def step(self) -> bool:
        """Make the notifications of the next page, and of the backlogs when due; True
        if there was a page."""
        if not self.leadership.is_leader():
            return False
        rules = self.rules()
        self._check_backlogs(rules)
        start = self._position.get()
        if not rules:
            self._skip_to_head(start)
            return False
        page = self._reader.rows(start)
        if page.position == start:
            return False
        if self._must_wait(rules, page.rows):
            self.stats.waited += 1
            return False
        self._isolation.apply(page, start, self._apply_rows)
        self.stats.pages += 1
        return True

    def _skip_to_head(self, start: int) -> None:
        """Without a rule nothing in the log is told of: move past it unread (a rule
        tells of what is recorded after it was made)."""
        head = self.ledger.recorder.max_notification_id() or 0
        if head > start:
            with self._database.transaction() as cursor:
                self._position.write(cursor, head)

    def rules(self) -> dict[str, NotificationRule]:
        """The enabled rules, read again only when they changed."""
        version = self.ledger.version(RULES_ID)
        if version is None:
            return {}
        if self._rules is None or self._rules.version != version:
            self._rules = self.ledger.notification_rules()
        found = self._rules.rules if self._rules is not None else {}
        return {name: rule for name, rule in found.items() if rule.enabled}

    def _apply_rows(self, rows: Sequence[LogRow], _start: int, position: int) -> bool:
        rules = self.rules()
        if rules:
            self._make(self._notices(rules, [self._reader.event(row) for row in rows]))
        with self._database.transaction() as cursor:
            self._position.write(cursor, position)
        return True

    def apply_one(self, row: LogRow) -> None:
        """Make one event's notifications again (a retry of a quarantined one)."""
        self._make(self._notices(self.rules(), [self._reader.event(row)]))

    # ---- what the events tell of ------------------------------------------------------

    def _notices(self, rules: dict[str, NotificationRule], events: list[Any]) -> list[_Notice]:
        page = self._load(events)
        notices: list[_Notice] = []
        for item in events:
            if isinstance(item, Execution.DeadLettered):
                run = page.runs.get(item.originator_id)
                if run is not None and run.spec.handler != HANDLER:  # never about itself
                    notices += self._dead_letter(rules, item, run, page)
            elif isinstance(item, Execution.Deferred):
                notices += _breaker(rules, item)
            elif isinstance(item, Workflow.Failed):
                notices += self._workflow(rules, item)
        return notices

    def _load(self, events: list[Any]) -> _Page:
        page = _Page()
        dead = [e.originator_id for e in events if isinstance(e, Execution.DeadLettered)]
        page.runs = load_many(self.ledger, Execution, dead)
        job_ids = {run.job_id for run in page.runs.values() if run.job_id is not None}
        jobs = self.ledger.get_jobs(job_ids) if job_ids else {}
        page.job_names = {job_id: job.definition.name for job_id, job in jobs.items()}
        return page

    def _dead_letter(
        self,
        rules: dict[str, NotificationRule],
        dead: Execution.DeadLettered,
        run: Execution,
        page: _Page,
    ) -> list[_Notice]:
        job = page.job_names.get(run.job_id) if run.job_id else None
        facts = {
            "execution_id": str(run.id),
            "job_id": str(run.job_id) if run.job_id else None,
            "job": job,
            "handler": run.spec.handler,
            "queue": run.spec.queue,
            "attempts": dead.attempts,
            "error": _cut(dead.error, TEXT_CHARS),
        }
        what = job or run.spec.handler
        cause = f"{run.id}:{dead.originator_version}"
        notices = []
        for name, rule in rules.items():
            if not _matches(rule, job=job, queue=run.spec.queue, handler=run.spec.handler):
                continue
            if rule.on is NotifyOn.DEAD_LETTER:
                message = _Message(
                    f"jobledger: a run of {what} was dead-lettered",
                    f"Run {run.id} of {what} (handler {run.spec.handler}, queue "
                    f"{run.spec.queue}) was dead-lettered after {dead.attempts} attempt(s).\n"
                    f"Last error: {facts['error']}",
                    f"/ui/executions/{run.id}",
                    facts,
                )
            elif rule.on is NotifyOn.FAILURES_IN_A_ROW and self._streak(rule, run):
                message = _Message(
                    f"jobledger: the last {rule.count} runs of {what} were dead-lettered",
                    f"The last {rule.count} runs of job {what} were dead-lettered; the last "
                    f"was {run.id}.\nLast error: {facts['error']}",
                    f"/ui/jobs/{run.job_id}",
                    facts,
                )
            else:
                continue
            notices.append(
                _notice(name, rule, about=what, cause=cause, message=message, raised=dead)
            )
        return notices

    def _streak(self, rule: NotificationRule, run: Execution) -> bool:
        """Whether ``run`` makes its job's ``count``-th dead letter in a row: once per
        streak, at the run that reaches it."""
        count = rule.count or 0
        if run.job_id is None or count < 1:
            return False
        cells = self._queries.recent_runs([run.job_id], per_job=count + 1).get(run.job_id, [])
        ended = [cell for cell in cells if cell.status not in _OPEN]
        streak = ended[:count]
        if len(streak) < count or streak[0].id != run.id:
            return False
        if any(cell.status != _DEAD for cell in streak):
            return False
        return len(ended) == count or ended[count].status != _DEAD

    def _must_wait(self, rules: dict[str, NotificationRule], rows: Sequence[LogRow]) -> bool:
        """Whether a dead letter of the page is one a streak rule looks at that the read
        models do not hold yet."""
        if not any(rule.on is NotifyOn.FAILURES_IN_A_ROW for rule in rules.values()):
            return False
        wanted = {
            _uuid(originator): version
            for _position, originator, version, topic, _state in rows
            if topic == Execution.DeadLettered.TOPIC
        }
        if not wanted:
            return False
        held = self._queries.execution_statuses(list(wanted))
        return any(held.get(run_id, ("", 0))[1] < version for run_id, version in wanted.items())

    def _workflow(
        self, rules: dict[str, NotificationRule], failed: Workflow.Failed
    ) -> list[_Notice]:
        wanted = {n: r for n, r in rules.items() if r.on is NotifyOn.WORKFLOW_FAILED}
        if not wanted:
            return []
        try:
            workflow = self.ledger.get_workflow(failed.originator_id)
        except NotFoundError:
            return []
        facts = {
            "workflow_id": str(workflow.id),
            "workflow": workflow.name,
            "failed_steps": list(failed.failed),
        }
        notices = []
        for name, rule in wanted.items():
            if rule.workflow is not None and rule.workflow != workflow.name:
                continue
            subject = f"jobledger: workflow {workflow.name} failed"
            text = f"Workflow {workflow.name} ({workflow.id}) failed at {', '.join(failed.failed)}."
            link = f"/ui/workflows/{workflow.id}"
            cause = f"{workflow.id}:{failed.originator_version}"
            message = _Message(subject, text, link, facts)
            notices.append(
                _notice(
                    name, rule, about=workflow.name, cause=cause, message=message, raised=failed
                )
            )
        return notices

    # ---- backlogs -----------------------------------------------------------------------

    def _check_backlogs(self, rules: dict[str, NotificationRule]) -> None:
        now = self._now()
        if self._next_backlog is not None and now < self._next_backlog:
            return
        self._next_backlog = now + self._backlog_every
        wanted = {n: r for n, r in rules.items() if r.on is NotifyOn.QUEUE_BACKLOG}
        if not wanted:
            return
        notices = []
        for queue in sorted(self._backend.queues()):
            due = self._backend.depths(queue, now=now).ready
            oldest = self._queries.oldest_due(queue, now=now)
            waited = None if oldest is None else now - oldest
            for name, rule in wanted.items():
                if rule.queue is None or rule.queue == queue:
                    notices += _backlog(name, rule, queue=queue, due=due, waited=waited, now=now)
        self._make(notices)

    # ---- making them --------------------------------------------------------------------

    def _make(self, notices: list[_Notice]) -> None:
        at = self._now()
        for notice in notices:
            key = delivery_key(notice.rule, notice.subject, notice.cause)
            if key in self._made:
                continue
            run = delivery_run(notice.delivery, key=key, at=at)
            try:
                self.ledger.save_all(run)
            except (ConflictError, AlreadyExistsError):
                self.stats.repeated += 1  # made before this page was read again
            else:
                self.stats.sent += 1
                if self._metrics is not None:
                    on = notice.delivery.on.value
                    self._metrics.notifications.labels(rule=notice.rule, on=on).inc()
                log.info(
                    "notification.raised",
                    rule=notice.rule,
                    on=notice.delivery.on.value,
                    execution_id=str(run.id),
                )
            self._made[key] = None
            if len(self._made) > KEYS_KEPT:
                self._made.popitem(last=False)


_OPEN = frozenset({ExecutionStatus.PENDING.value, ExecutionStatus.RUNNING.value})
_DEAD = ExecutionStatus.DEAD_LETTERED.value


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(value)


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _matches(rule: NotificationRule, *, job: str | None, queue: str, handler: str) -> bool:
    return (
        (rule.job is None or rule.job == job)
        and (rule.queue is None or rule.queue == queue)
        and (rule.handler is None or rule.handler == handler)
    )


@dataclass(frozen=True)
class _Message:
    subject: str
    text: str
    link: str
    facts: dict[str, Any]


def _notice(
    name: str,
    rule: NotificationRule,
    *,
    about: str,
    cause: str,
    message: _Message,
    raised: Any,  # noqa: ANN401 (the event that raised it)
) -> _Notice:
    at: datetime = raised.timestamp
    delivery = Delivery(
        rule=name,
        on=rule.on,
        subject=message.subject,
        text=message.text,
        channel=rule.channel,
        link=message.link,
        facts=message.facts,
        at=at,
    )
    return _Notice(name, about, cause_of(rule, at, cause), delivery)


def _breaker(rules: dict[str, NotificationRule], deferred: Execution.Deferred) -> list[_Notice]:
    handler, found, _ = deferred.reason.partition(CIRCUIT_OPEN)
    if not found:
        return []
    facts = {"handler": handler, "reason": _cut(deferred.reason, TEXT_CHARS)}
    notices = []
    for name, rule in rules.items():
        if rule.on is not NotifyOn.BREAKER_OPENED:
            continue
        if rule.handler is not None and rule.handler != handler:
            continue
        subject = f"jobledger: the circuit breaker of {handler} is open"
        text = (
            f"Runs of {handler} are deferred, not failed, until its breaker lets a probe "
            f"through and it succeeds.\n{facts['reason']}"
        )
        cause = f"{deferred.originator_id}:{deferred.originator_version}"
        message = _Message(subject, text, "/ui/workers", facts)
        notices.append(
            _notice(name, rule, about=handler, cause=cause, message=message, raised=deferred)
        )
    return notices


def _backlog(
    name: str,
    rule: NotificationRule,
    *,
    queue: str,
    due: int,
    waited: timedelta | None,
    now: datetime,
) -> list[_Notice]:
    too_many = rule.count is not None and due > rule.count
    too_old = rule.older_than is not None and waited is not None and waited > rule.older_than
    if not (too_many or too_old):
        return []
    age = "" if waited is None else f"; the oldest has waited {int(waited.total_seconds())} s"
    subject = f"jobledger: queue {queue} is backed up"
    text = f"Queue {queue} holds {due} due run(s){age}."
    facts = {
        "queue": queue,
        "due": due,
        "oldest_waited_seconds": None if waited is None else waited.total_seconds(),
    }
    delivery = Delivery(
        rule=name,
        on=rule.on,
        subject=subject,
        text=text,
        channel=rule.channel,
        link="/ui/system",
        facts=facts,
        at=now,
    )
    return [_Notice(name, queue, cause_of(rule, now, now.isoformat()), delivery)]


class NotifierLoop:
    """The notifier's follower in the scheduler process: woken by the log's channel
    (through the releases' listener, ``wakeup``) and polled every ``poll`` seconds, which
    is also how often a due backlog check can run."""

    name = "notifier"

    def __init__(
        self,
        notifier: Notifier,
        *,
        poll: float,
        wakeup: Wakeup | None = None,
        health: StepHealth | None = None,
    ) -> None:
        self.notifier = notifier
        self.wakeup = wakeup or Wakeup()
        # Woken by every commit under load: it reads a page a quarter of a second after
        # a wake-up at the soonest, so a busy log costs it a few reads a second, not one
        # per commit.
        self._follower = Follower(
            "notifier",
            notifier.step,
            self.wakeup,
            poll_interval=poll,
            health=health,
            coalesce=COALESCE_SECONDS,
            spacing=COALESCE_SECONDS,
        )

    def start(self) -> None:
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self._follower.wait(timeout)
