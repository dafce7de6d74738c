"""Every request the clients make, built once: the method, the path, the query, the
body and the type its answer decodes to. ``Client`` sends them with a blocking httpx
client and ``AsyncClient`` with an async one; neither adds anything but the sending."""

import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar, cast
from urllib.parse import parse_qs, quote, urlsplit

import msgspec

from jobledger.client.errors import (
    ExecutionCancelledError,
    ExecutionFailedError,
    ValidationError,
    WaitTimedOutError,
    WorkflowFailedError,
    WorkflowTimedOutError,
)
from jobledger.declarations import HandlerDeclaration
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.instants import check_instant
from jobledger.domain.policies import DEFAULT_PRIORITY, BackfillOverlap
from jobledger.schemas.events import EventOut
from jobledger.schemas.executions import (
    MAX_BATCH_RUNS,
    BatchRunIn,
    BulkDiscardIn,
    BulkReport,
    BulkRequeueIn,
    BulkRunsIn,
    ExecutionDetail,
    ExecutionRef,
    RunBatchIn,
    RunBatchOut,
    RunIn,
    TriggerIn,
    UniqueIn,
)
from jobledger.schemas.handlers import HandlerOut
from jobledger.schemas.jobs import (
    ApplyIn,
    ApplyOut,
    BackfillIn,
    BackfillReport,
    DependenciesOut,
    JobIn,
    JobOut,
    JobPatch,
    LimitsIn,
    ManagedJobIn,
    PreviewIn,
    PreviewOut,
    ReasonIn,
    RetryIn,
    ScheduleIn,
)
from jobledger.schemas.limits import LimitIn, LimitList, LimitOut, LimitStateOut, LimitValuesIn
from jobledger.schemas.notifications import (
    NamedRuleIn,
    NotificationList,
    NotificationRuleIn,
    NotificationRuleList,
    NotificationRuleOut,
    NotificationRuleStateOut,
    NotificationsApplyIn,
    NotificationsApplyOut,
    NotificationTestOut,
)
from jobledger.schemas.queues import DrainIn, DrainReport, PauseIn, QueueList, QueueStateOut
from jobledger.schemas.rows import DeadLetterGroup, ExecutionRow, JobRow, Page, WorkflowRow
from jobledger.schemas.system import Readiness
from jobledger.schemas.workflows import WorkflowIn, WorkflowOut

T = TypeVar("T")
Id = uuid.UUID | str
# A run: its id, or the reference enqueue() answered with.
RunId = uuid.UUID | str | ExecutionRef
Payload = msgspec.Struct | Mapping[str, Any] | None
# A workflow: its id, or the workflow create() answered with.
WorkflowId = uuid.UUID | str | WorkflowOut
# The server's bound on one long-poll; a longer wait is several of them.
MAX_POLL_SECONDS = 60.0
# "skipped": a run that never ran, since a run it depended on failed (``depends_on``).
TERMINAL = frozenset({"completed", "dead_lettered", "cancelled", "discarded", "skipped"})
# A workflow's ends, and how often wait() looks again (there is no long-poll of one).
WORKFLOW_ENDS = frozenset({"completed", "failed", "cancelled"})
WORKFLOW_POLL = (0.05, 1.0)  # seconds: the first look again, doubled up to the last


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer. A POST carries an Idempotency-Key (a new
    one unless given), the same on every retry of it."""

    method: str
    path: str
    decode: Callable[[bytes], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: object = None
    key: str | None = None
    # A status that is an answer, not an error (GET /ready answers 503 with its body).
    answers: frozenset[int] = frozenset()
    timeout: float | None = None  # beyond the client's own (a long-poll's wait)
    # An answer whose headers count too (a list page's Link): read instead of decode.
    read: Callable[[bytes, Mapping[str, str]], T] | None = None

    def headers(self) -> dict[str, str]:
        return {"Idempotency-Key": self.key} if self.key is not None else {}

    def content(self) -> bytes | None:
        return None if self.body is None else msgspec.json.encode(self.body)

    def after(self, cursor: str) -> "Call[T]":
        """The same list call for the page after ``cursor``."""
        return replace(self, params={**self.params, "cursor": cursor})


# The most a page of a list holds (the API's bound): whole lists are read in such pages.
PAGE_MAX = 500
_NEXT = re.compile(r'<(?P<url>[^>]*)>\s*;\s*rel="next"')


class Paged(Protocol):
    """A page of any list: the cursor of the page after it (None: the last page)."""

    @property
    def next_cursor(self) -> str | None: ...


class Listed(Paged, Protocol):
    """A page of a list whose items are the rows (``Page``, ``Linked``)."""

    @property
    def items(self) -> list[Any]: ...


PagedT = TypeVar("PagedT", bound=Paged)
ListedT = TypeVar("ListedT", bound=Listed)


class Linked(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a list the API answers as an array (tokens, users, quarantine,
    workers, handlers, an aggregate's events): its items, and the next page's cursor
    from the ``Link`` header."""

    items: list[Any]
    next_cursor: str | None = None


def next_cursor_of(link: str | None) -> str | None:
    """The cursor of the ``rel="next"`` page a Link header names (None: no next)."""
    found = _NEXT.search(link or "")
    if found is None:
        return None
    cursors = parse_qs(urlsplit(found["url"]).query).get("cursor")
    return cursors[0] if cursors else None


def _linked(path: str, rows: Any, limit: int, cursor: str | None) -> Call[Linked]:  # noqa: ANN401 (a type form: list[EventOut], ...)
    decoder = msgspec.json.Decoder(rows)

    def read(content: bytes, headers: Mapping[str, str]) -> Linked:
        return Linked(
            items=decoder.decode(content), next_cursor=next_cursor_of(headers.get("link"))
        )

    def decode(content: bytes) -> Linked:
        return read(content, {})

    return Call("GET", path, decode, params=_given({"limit": limit, "cursor": cursor}), read=read)


def whole_queues(pages: Sequence[QueueList]) -> QueueList:
    """The queues of every page in one list."""
    return QueueList(queues=[queue for page in pages for queue in page.queues])


def whole_limits(pages: Sequence[LimitList]) -> LimitList:
    """The named limits of every page in one list (each page has every key in use)."""
    named = [limit for page in pages for limit in page.limits]
    return LimitList(limits=named, keys=pages[-1].keys if pages else [])


def _decoder(kind: Any) -> Callable[[bytes], Any]:  # noqa: ANN401 (a type form)
    decoder = msgspec.json.Decoder(kind)
    return decoder.decode


def _list(
    path: str,
    rows: Any,  # noqa: ANN401 (a type form: list[JobRow], list[ExecutionRow])
    limit: int,
    cursor: str | None,
    **filters: object,
) -> Call[Page]:
    """A page of a list, its items decoded as ``rows`` (the API's Page holds any items)."""
    page_decoder = msgspec.json.Decoder(Page)

    def decode(content: bytes) -> Page:
        page = page_decoder.decode(content)
        return msgspec.structs.replace(page, items=msgspec.convert(page.items, rows))

    query = {k: _query(v) for k, v in {**filters, "limit": limit, "cursor": cursor}.items()}
    return Call("GET", path, decode, params=_given(query))


def _get(path: str, kind: Any, **params: Any) -> Call[Any]:  # noqa: ANN401 (a type form)
    query = {name: _query(value) for name, value in params.items() if value is not None}
    return Call("GET", path, _decoder(kind), params=query)


def _post(path: str, kind: Any, body: object = None, *, key: str | None = None) -> Call[Any]:  # noqa: ANN401 (a type form)
    return Call("POST", path, _decoder(kind), body=body, key=key or uuid.uuid4().hex)


def _query(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, uuid.UUID) else value


# ---- jobs ------------------------------------------------------------------------------


def create_job(job: JobIn, idempotency_key: str | None) -> Call[JobOut]:
    return _post("/api/v1/jobs", JobOut, job, key=idempotency_key)


def get_job(job_id: Id, as_of: datetime | int | None) -> Call[JobOut]:
    return _get(f"/api/v1/jobs/{job_id}", JobOut, as_of=as_of)


def list_jobs(limit: int, cursor: str | None, **filters: object) -> Call[Page]:
    return _list("/api/v1/jobs", list[JobRow], limit, cursor, **filters)


def update_job(job_id: Id, patch: JobPatch | Mapping[str, Any], override: bool) -> Call[JobOut]:  # noqa: FBT001 (internal)
    body = patch if isinstance(patch, JobPatch) else msgspec.convert(patch, JobPatch)
    params = {"override": "true"} if override else {}
    return Call("PATCH", f"/api/v1/jobs/{job_id}", _decoder(JobOut), params=params, body=body)


def delete_job(job_id: Id, override: bool) -> Call[JobOut]:  # noqa: FBT001 (internal)
    params = {"override": "true"} if override else {}
    return Call("DELETE", f"/api/v1/jobs/{job_id}", _decoder(JobOut), params=params)


def pause_job(job_id: Id, reason: str) -> Call[JobOut]:
    return _post(f"/api/v1/jobs/{job_id}/pause", JobOut, ReasonIn(reason=reason))


def resume_job(job_id: Id) -> Call[JobOut]:
    return _post(f"/api/v1/jobs/{job_id}/resume", JobOut)


def trigger_job(
    job_id: Id, idempotency_key: str | None, unique: UniqueIn | None = None
) -> Call[ExecutionRef]:
    body = None if unique is None else TriggerIn(unique=unique)
    return _post(f"/api/v1/jobs/{job_id}/trigger", ExecutionRef, body, key=idempotency_key)


def job_history(job_id: Id, limit: int = PAGE_MAX, cursor: str | None = None) -> Call[Linked]:
    return _linked(f"/api/v1/jobs/{job_id}/events", list[EventOut], limit, cursor)


def job_executions(job_id: Id, limit: int, cursor: str | None, status: str | None) -> Call[Page]:
    return _list(
        f"/api/v1/jobs/{job_id}/executions", list[ExecutionRow], limit, cursor, status=status
    )


def preview_job(job_id: Id, count: int) -> Call[PreviewOut]:
    return _get(f"/api/v1/jobs/{job_id}/preview", PreviewOut, count=count)


def preview_schedule(schedule: ScheduleIn, count: int, after: datetime | None) -> Call[PreviewOut]:
    body = PreviewIn(schedule=schedule, count=count, after=after)
    return _post("/api/v1/schedules/preview", PreviewOut, body)


def apply(
    jobs: list[ManagedJobIn],
    prune: bool,  # noqa: FBT001 (internal)
    dry_run: bool,  # noqa: FBT001 (internal)
    scope: str | None = None,
) -> Call[ApplyOut]:
    body = ApplyIn(jobs=jobs, prune=prune, dry_run=dry_run, scope=scope)
    return _post("/api/v1/jobs:apply", ApplyOut, body)


def handlers(limit: int = PAGE_MAX, cursor: str | None = None) -> Call[Linked]:
    return _linked("/api/v1/handlers", list[HandlerOut], limit, cursor)


def job_dependencies(job_id: Id) -> Call[DependenciesOut]:
    return _get(f"/api/v1/jobs/{job_id}/dependencies", DependenciesOut)


def backfill_job(job_id: Id, body: BackfillIn) -> Call[BackfillReport]:
    return _post(f"/api/v1/jobs/{job_id}/backfill", BackfillReport, body)


def backfill_body(
    start: datetime, end: datetime, *, overlap: str, limit: int, reason: str, dry_run: bool
) -> BackfillIn:
    return BackfillIn(
        start=start,
        end=end,
        overlap=BackfillOverlap(overlap),
        max=limit,
        reason=reason,
        dry_run=dry_run,
    )


# ---- workflows -------------------------------------------------------------------------


def create_workflow(
    workflow: WorkflowIn | Mapping[str, Any], idempotency_key: str | None
) -> Call[WorkflowOut]:
    body = workflow if isinstance(workflow, WorkflowIn) else msgspec.convert(workflow, WorkflowIn)
    return _post("/api/v1/workflows", WorkflowOut, body, key=idempotency_key)


def get_workflow(workflow_id: WorkflowId) -> Call[WorkflowOut]:
    return _get(f"/api/v1/workflows/{workflow_of(workflow_id)}", WorkflowOut)


def cancel_workflow(workflow_id: WorkflowId, reason: str) -> Call[WorkflowOut]:
    return _post(
        f"/api/v1/workflows/{workflow_of(workflow_id)}/cancel",
        WorkflowOut,
        ReasonIn(reason=reason),
    )


def workflow_history(
    workflow_id: WorkflowId, limit: int = PAGE_MAX, cursor: str | None = None
) -> Call[Linked]:
    path = f"/api/v1/workflows/{workflow_of(workflow_id)}/events"
    return _linked(path, list[EventOut], limit, cursor)


def list_workflows(limit: int, cursor: str | None, **filters: object) -> Call[Page]:
    return _list("/api/v1/workflows", list[WorkflowRow], limit, cursor, **filters)


def workflow_of(workflow: WorkflowId) -> Id:
    return workflow.id if isinstance(workflow, WorkflowOut) else workflow


class WorkflowWaiting:
    """The looks of one workflow ``wait``: each after a pause that doubles up to a
    second, none past the timeout; the last one seen is what a timeout reports."""

    def __init__(
        self, workflow_id: WorkflowId, timeout: float | None, clock: Callable[[], float]
    ) -> None:
        self.workflow_id = workflow_of(workflow_id)
        self.timeout = timeout
        self.clock = clock
        self.deadline = None if timeout is None else clock() + timeout
        self.pause = WORKFLOW_POLL[0]
        self.last: WorkflowOut | None = None

    def call(self) -> Call[WorkflowOut]:
        return get_workflow(self.workflow_id)

    def seen(self, workflow: WorkflowOut) -> float | None:
        """None once the workflow completed; else how long to pause before the next
        look. Raises WorkflowFailedError if it failed or was cancelled, and
        WorkflowTimedOutError when the pause would pass the timeout."""
        self.last = workflow
        if workflow.status in WORKFLOW_ENDS:
            if workflow.status != "completed":
                raise WorkflowFailedError(workflow)
            return None
        pause, self.pause = self.pause, min(self.pause * 2, WORKFLOW_POLL[1])
        if self.deadline is not None:
            left = self.deadline - self.clock()
            if left <= 0:
                raise WorkflowTimedOutError(self.workflow_id, self.timeout or 0.0, workflow)
            pause = min(pause, left)
        return pause


# ---- executions ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunOptions:
    """How and when an enqueued run runs (the rest of an ad-hoc run's body)."""

    queue: str = "default"
    priority: int = DEFAULT_PRIORITY
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    timeout_seconds: float | None = None
    retry: RetryIn | None = None
    unique: UniqueIn | None = None
    limits: LimitsIn | Mapping[str, Any] | None = None
    expires_at: datetime | None = None


def run_body(
    handler: str | HandlerDeclaration[..., Any],
    payload: Payload,
    options: RunOptions,
    kind: type[RunIn] = RunIn,
) -> RunIn:
    """The body of an ad-hoc run of ``handler`` (a name, or the declared function)."""
    name = handler.name if isinstance(handler, HandlerDeclaration) else handler
    body = msgspec.to_builtins(payload) if payload is not None else {}
    delay = options.delay.total_seconds() if isinstance(options.delay, timedelta) else options.delay
    extra: dict[str, Any] = {}
    if options.timeout_seconds is not None:
        extra["timeout_seconds"] = options.timeout_seconds
    if options.retry is not None:
        extra["retry"] = options.retry
    if options.unique is not None:
        extra["unique"] = options.unique
    if options.limits is not None:
        extra["limits"] = limits_of(options.limits)
    if options.run_at is not None:
        _checked_instant("run_at", options.run_at)
    if options.expires_at is not None:
        extra["expires_at"] = options.expires_at
        _checked_instant("expires_at", options.expires_at)
    return kind(
        handler=name,
        payload=body,
        queue=options.queue,
        priority=options.priority,
        run_at=options.run_at,
        delay_seconds=delay,
        **extra,
    )


def _checked_instant(field: str, value: datetime) -> datetime:
    """``value`` if the server takes it; else the ``ValidationError`` it would answer,
    raised before anything is sent (or written into an outbox)."""
    try:
        check_instant(field, value)
    except InvalidDefinitionError as error:
        problem = f"{error.field}: {error.problem}"
        raise ValidationError(problem, code="invalid", field=error.field, fix=error.fix) from None
    return value


def limits_of(limits: LimitsIn | Mapping[str, Any]) -> LimitsIn:
    """A run's limits, from the struct or from a mapping of the same fields."""
    return limits if isinstance(limits, LimitsIn) else msgspec.convert(limits, LimitsIn)


BATCH_PATH = "/api/v1/executions:batch"


def enqueue(body: RunIn, idempotency_key: str | None) -> Call[ExecutionRef]:
    return _post("/api/v1/executions", ExecutionRef, body, key=idempotency_key)


def enqueue_batches(
    handler: str | HandlerDeclaration[..., Any],
    payloads: Iterable[Payload],
    options: RunOptions,
    idempotency_key: str | None,
) -> Iterator[Call[RunBatchOut]]:
    """One batch request per ``MAX_BATCH_RUNS`` payloads, each with the key
    ``{key}/{n}``: a retry of a batch, or of the whole call with the same key, returns
    the runs it made instead of making more."""
    base = idempotency_key or uuid.uuid4().hex
    runs: list[BatchRunIn] = []
    number = 0
    for payload in payloads:
        runs.append(cast("BatchRunIn", run_body(handler, payload, options, BatchRunIn)))
        if len(runs) == MAX_BATCH_RUNS:
            yield _post(BATCH_PATH, RunBatchOut, RunBatchIn(runs=runs), key=f"{base}/{number}")
            runs, number = [], number + 1
    if runs:
        yield _post(BATCH_PATH, RunBatchOut, RunBatchIn(runs=runs), key=f"{base}/{number}")


def batch_refs(batch: RunBatchOut) -> list[ExecutionRef]:
    """A batch's runs, each carrying the batch's warnings (all its runs share a queue
    in ``enqueue_many``), so a list of runs still says that no worker serves it."""
    for ref in batch.executions:
        ref.warnings = ref.warnings or batch.warnings
    return batch.executions


def get_execution(execution_id: RunId, wait: float | None) -> Call[ExecutionDetail]:
    call: Call[ExecutionDetail] = _get(
        f"/api/v1/executions/{id_of(execution_id)}", ExecutionDetail, wait=wait
    )
    return replace(call, timeout=wait) if wait else call


def list_executions(limit: int, cursor: str | None, **filters: object) -> Call[Page]:
    return _list("/api/v1/executions", list[ExecutionRow], limit, cursor, **filters)


def cancel(execution_id: RunId, reason: str) -> Call[ExecutionRef]:
    return _post(
        f"/api/v1/executions/{id_of(execution_id)}/cancel", ExecutionRef, ReasonIn(reason=reason)
    )


def execution_history(
    execution_id: RunId, limit: int = PAGE_MAX, cursor: str | None = None
) -> Call[Linked]:
    path = f"/api/v1/executions/{id_of(execution_id)}/events"
    return _linked(path, list[EventOut], limit, cursor)


def id_of(execution: RunId) -> Id:
    return execution.id if isinstance(execution, ExecutionRef) else execution


class Waiting:
    """The long-polls of one ``wait``: each asks for at most the time left, and the
    last one seen is what a timeout reports."""

    def __init__(self, execution_id: Id, timeout: float | None, clock: Callable[[], float]) -> None:
        self.execution_id = execution_id
        self.timeout = timeout
        self.clock = clock
        self.deadline = None if timeout is None else clock() + timeout
        self.last: ExecutionRow | None = None

    def next(self) -> Call[ExecutionDetail]:
        """The next long-poll; WaitTimedOutError when no time is left."""
        left = MAX_POLL_SECONDS if self.deadline is None else self.deadline - self.clock()
        if left <= 0:
            raise WaitTimedOutError(self.execution_id, self.timeout or 0.0, self.last)
        return get_execution(self.execution_id, wait=min(left, MAX_POLL_SECONDS))

    def seen(self, detail: ExecutionDetail) -> dict[str, Any] | None:
        self.last = detail.execution
        return finished(detail)


def finished(detail: ExecutionDetail) -> dict[str, Any] | None:
    """The result of a run that completed; None while it has not finished. A run that
    ended otherwise raises: dead-lettered with its last error, cancelled, discarded, or
    skipped (a run it depended on failed)."""
    row = detail.execution
    if row.status not in TERMINAL:
        return None
    if row.status == "completed":
        return row.result or {}
    if row.status == "dead_lettered":
        raise ExecutionFailedError(row)
    raise ExecutionCancelledError(row)


# ---- dead letters ----------------------------------------------------------------------


def list_dead_letters(limit: int, cursor: str | None, **filters: object) -> Call[Page]:
    return _list("/api/v1/dlq", list[ExecutionRow], limit, cursor, **filters)


def dead_letter_groups(limit: int) -> Call[list[DeadLetterGroup]]:
    call: Call[list[DeadLetterGroup]] = _get(
        "/api/v1/dlq/groups", list[DeadLetterGroup], limit=limit
    )
    return call


def requeue(execution_id: RunId, reason: str) -> Call[BulkReport]:
    return _post(f"/api/v1/dlq/{id_of(execution_id)}/requeue", BulkReport, ReasonIn(reason=reason))


def requeue_matching(selection: BulkRequeueIn) -> Call[BulkReport]:
    return _post("/api/v1/dlq/requeue", BulkReport, selection)


def discard_matching(selection: BulkDiscardIn) -> Call[BulkReport]:
    return _post("/api/v1/dlq/discard", BulkReport, selection)


def cancel_many(selection: BulkRunsIn) -> Call[BulkReport]:
    return _post("/api/v1/executions/cancel", BulkReport, selection)


def retry_now(selection: BulkRunsIn) -> Call[BulkReport]:
    return _post("/api/v1/executions/retry", BulkReport, selection)


def discard(execution_id: RunId, reason: str) -> Call[BulkReport]:
    return Call(
        "DELETE",
        f"/api/v1/dlq/{id_of(execution_id)}",
        _decoder(BulkReport),
        params={"reason": reason},
    )


# ---- queues and limits -----------------------------------------------------------------


def _segment(name: str) -> str:
    """A queue's or a limit's name as one path segment (a key may hold ``/``)."""
    return quote(name, safe="")


def queues(limit: int = PAGE_MAX, cursor: str | None = None) -> Call[QueueList]:
    return _get("/api/v1/queues", QueueList, limit=limit, cursor=cursor)


def pause_queue(name: str, reason: str) -> Call[QueueStateOut]:
    return _post(f"/api/v1/queues/{_segment(name)}/pause", QueueStateOut, PauseIn(reason=reason))


def resume_queue(name: str) -> Call[QueueStateOut]:
    return _post(f"/api/v1/queues/{_segment(name)}/resume", QueueStateOut)


def drain_queue(name: str, reason: str, *, dry_run: bool) -> Call[DrainReport]:
    body = DrainIn(reason=reason, dry_run=dry_run)
    return _post(f"/api/v1/queues/{_segment(name)}/drain", DrainReport, body)


def limits(limit: int = PAGE_MAX, cursor: str | None = None) -> Call[LimitList]:
    return _get("/api/v1/limits", LimitList, limit=limit, cursor=cursor)


def get_limit(name: str) -> Call[LimitOut]:
    return _get(f"/api/v1/limits/{_segment(name)}", LimitOut)


def create_limit(
    name: str, *, concurrency: int | None, rate: int | None, per_seconds: float | None
) -> Call[LimitStateOut]:
    body = LimitIn(name=name, concurrency=concurrency, rate=rate, per_seconds=per_seconds)
    return _post("/api/v1/limits", LimitStateOut, body)


def change_limit(
    name: str, *, concurrency: int | None, rate: int | None, per_seconds: float | None
) -> Call[LimitStateOut]:
    body = LimitValuesIn(concurrency=concurrency, rate=rate, per_seconds=per_seconds)
    path = f"/api/v1/limits/{_segment(name)}"
    return Call("PUT", path, _decoder(LimitStateOut), body=body)


# ---- notifications ---------------------------------------------------------------------


def _rule_path(name: str) -> str:
    return f"/api/v1/notifications/rules/{_segment(name)}"


def notifications(limit: int = 50, cursor: str | None = None) -> Call[NotificationList]:
    return _get("/api/v1/notifications", NotificationList, limit=limit, cursor=cursor)


def notification_rules() -> Call[NotificationRuleList]:
    return _get("/api/v1/notifications/rules", NotificationRuleList)


def notification_rule(name: str) -> Call[NotificationRuleOut]:
    return _get(_rule_path(name), NotificationRuleOut)


def rule_of(rule: NotificationRuleIn | Mapping[str, Any]) -> NotificationRuleIn:
    """A rule, from the struct or from a mapping of the same fields (as the API and a
    jobs file's ``[[notifications]]`` take them)."""
    if isinstance(rule, NotificationRuleIn):
        return rule
    return msgspec.convert(rule, NotificationRuleIn)


def save_notification_rule(
    name: str, rule: NotificationRuleIn | Mapping[str, Any]
) -> Call[NotificationRuleStateOut]:
    body = rule_of(rule)
    return Call("PUT", _rule_path(name), _decoder(NotificationRuleStateOut), body=body)


def delete_notification_rule(name: str) -> Call[NotificationRuleStateOut]:
    return Call("DELETE", _rule_path(name), _decoder(NotificationRuleStateOut))


def test_notification_rule(name: str) -> Call[NotificationTestOut]:
    return _post(f"{_rule_path(name)}/test", NotificationTestOut)


def apply_notifications(
    rules: list[NamedRuleIn], *, scope: str, prune: bool, dry_run: bool
) -> Call[NotificationsApplyOut]:
    body = NotificationsApplyIn(rules=rules, scope=scope, prune=prune, dry_run=dry_run)
    return _post("/api/v1/notifications/rules:apply", NotificationsApplyOut, body)


# ---- system ----------------------------------------------------------------------------


def health() -> Call[Readiness]:
    return Call("GET", "/ready", _decoder(Readiness), answers=frozenset({503}))


def _given(params: dict[str, object]) -> dict[str, object]:
    return {name: value for name, value in params.items() if value is not None}
