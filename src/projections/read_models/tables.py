"""The read-model tables behind the REST API and the dashboard, and how events fold
into them.

Six tables beside the event store (migration 0004): jobs (current state), executions
(one row each), attempts (one row per lease), per-minute counters, per-minute lateness
and duration histograms, and how many jobs and executions are in each status; and a
row per workflow (migration 0020, folded in ``read_models.workflows``).
``read_models`` follows the log into them, ``read_model_rebuild`` folds the whole log
into new ones, ``read_queries`` reads them.

A fold holds rows in memory: every event is applied to them in log order, and each
changed row is written once per page. Every job and execution row keeps the version of
the last event folded into it, and an older or equal event changes nothing, so a page
applied again leaves every table as it was. Counters, histograms and status counts only
count events that changed a row, so they are guarded by the same versions.

Definitions of the derived fields: ``attempt`` is the attempt an execution is on (as
in the queue), counted over its whole life; ``max_attempts`` the number of the last
attempt its current budget allows (a requeue from the dead-letter queue grants a fresh
budget of ``attempt_budget`` attempts after those used, so it reads "attempt 3 of 4",
never "3 of 2"); ``started_at`` is the start of its first attempt and ``lateness_ms``
that start minus ``scheduled_for`` (for runs outside the schedule and for backfills,
whose occurrences are in the past on purpose, minus the enqueue time); ``finished_at``
is when it last reached a terminal status; ``duration_ms`` is that of its latest
finished attempt (the handler's own measure for a completion, the
time from lease to report otherwise). An attempt settled by a lease expiry keeps the
outcome ``lease_expired``: the retry or dead letter that follows is the execution's
verdict, not the attempt's. A job's ``last_fired_at`` is the time of its latest fire
or manual trigger; ``updated_at``/``updated_by`` change with operator changes (update,
pause, resume, delete) only.
"""

import functools
import math
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec
import structlog

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import (
    LEASE_EXPIRED_ERROR,
    Execution,
    ExecutionStatus,
    Trigger,
    expiry_reason,
)
from jobledger.domain.job import Job
from jobledger.domain.schedules import CronSchedule, OneShotSchedule
from jobledger.persistence.codec import EventView
from jobledger.projections.database import (
    Cursor,
    Row,
)
from jobledger.projections.read_models.workflows import WORKFLOW_EVENTS, WORKFLOWS, WorkflowRows
from jobledger.projections.times import to_ms
from jobledger.schemas.rows import ProgressRow

log = structlog.get_logger(__name__)
_encoder = msgspec.json.Encoder()

ID_CHUNK = 500  # ids per IN (...) list, well below SQLite's parameter limit

JOBS = "jobledger_rm_jobs"
EXECUTIONS = "jobledger_rm_executions"
ATTEMPTS = "jobledger_rm_attempts"
MINUTE_STATS = "jobledger_rm_minute_stats"
HISTOGRAMS = "jobledger_rm_minute_histograms"
STATUS_COUNTS = "jobledger_rm_status_counts"
TABLES = (JOBS, EXECUTIONS, ATTEMPTS, MINUTE_STATS, HISTOGRAMS, STATUS_COUNTS, WORKFLOWS)
# The kinds of STATUS_COUNTS rows.
JOB_KIND = "jobs"
EXECUTION_KIND = "executions"

JOB_COLUMNS = (
    "id", "name", "handler", "queue", "priority", "schedule_kind", "cron", "timezone",
    "run_at_ms", "status", "next_fire_at_ms", "last_fired_at_ms", "last_execution_id",
    "last_status", "last_finished_at_ms", "created_at_ms", "created_by", "updated_at_ms",
    "updated_by", "version", "definition", "source",
)  # fmt: skip
EXECUTION_COLUMNS = (
    "id", "job_id", "handler", "queue", "priority", "trigger", "status", "attempt",
    "max_attempts", "scheduled_for_ms", "enqueued_at_ms", "ready_at_ms", "started_at_ms",
    "finished_at_ms", "worker_id", "lease_id", "lease_seq", "last_error", "result",
    "duration_ms", "lateness_ms", "closed_by", "closed_reason", "version", "attempt_budget",
    "progress", "enqueued_by", "enqueued_via", "closed_via", "waiting", "payload_text",
    "search_text",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "execution_id", "seq", "attempt", "worker_id", "lease_id", "started_at_ms",
    "finished_at_ms", "outcome", "error", "duration_ms",
)  # fmt: skip
STAT_COLUMNS = ("fired", "completed", "failed", "dead_lettered")
FIRED, COMPLETED, FAILED, DEAD_LETTERED = range(4)  # indexes into STAT_COLUMNS
LATENESS = "lateness"
DURATION = "duration"
# Executions that no event can change any more; dead letters are not among them (they
# can still be requeued or discarded).
FINAL_STATUSES = (
    ExecutionStatus.COMPLETED.value,
    ExecutionStatus.CANCELLED.value,
    ExecutionStatus.DISCARDED.value,
    ExecutionStatus.SKIPPED.value,
)

# Histograms: bucket i > 0 holds the values in (BASE * GAMMA**(i-1), BASE * GAMMA**i];
# its representative value is within RELATIVE_ERROR of each of them (a DDSketch-style
# log scale). Bucket 0 holds everything up to BASE (and negative lateness from clock
# skew) and reads back as 0.
RELATIVE_ERROR = 0.02
GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
HISTOGRAM_BASE_MS = 0.01
_LOG_GAMMA = math.log(GAMMA)


def bucket_of(value_ms: float) -> int:
    if value_ms <= HISTOGRAM_BASE_MS:
        return 0
    return max(1, math.ceil(math.log(value_ms / HISTOGRAM_BASE_MS) / _LOG_GAMMA))


def bucket_value(bucket: int) -> float:
    """The representative value of ``bucket`` (ms)."""
    if bucket <= 0:
        return 0.0
    return HISTOGRAM_BASE_MS * 2 * GAMMA**bucket / (GAMMA + 1)


def minute_of(ms: int) -> int:
    return ms - ms % 60_000


# ---- folding job events -----------------------------------------------------------

# The statuses as the tables hold them: read once, not through the enum per event.
_PENDING = ExecutionStatus.PENDING.value
_BACKFILL = Trigger.BACKFILL.value
_RUNNING = ExecutionStatus.RUNNING.value
_COMPLETED = ExecutionStatus.COMPLETED.value
_DEAD_LETTERED = ExecutionStatus.DEAD_LETTERED.value
_SKIPPED = ExecutionStatus.SKIPPED.value


def _job_text(job_id: uuid.UUID | str) -> str:
    """A job's id as text (the fold's view of a run reads it as text already)."""
    return job_id if isinstance(job_id, str) else _uuid_text(job_id)


@functools.lru_cache(maxsize=65_536)
def _uuid_text(job_id: uuid.UUID) -> str:
    """Many executions name each job, and ``UUID.__str__`` costs several times a lookup
    here."""
    return str(job_id)


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def _definition_columns(definition: JobDefinition) -> Row:
    schedule = definition.schedule
    spec = definition.spec
    return {
        "name": definition.name,
        "handler": spec.handler,
        "queue": spec.queue,
        "priority": spec.priority,
        "schedule_kind": str(type(schedule).__struct_config__.tag),
        "cron": schedule.expression if isinstance(schedule, CronSchedule) else None,
        "timezone": schedule.timezone if isinstance(schedule, CronSchedule) else None,
        "run_at_ms": to_ms(schedule.run_at) if isinstance(schedule, OneShotSchedule) else None,
        "definition": msgspec.json.encode(definition).decode(),
    }


def _scheduled_row(event: Job.Scheduled) -> Row:
    at = to_ms(event.timestamp)
    return {
        "id": str(event.originator_id),
        **_definition_columns(event.definition),
        "status": "active",
        "next_fire_at_ms": _ms(event.next_fire_at),
        "last_fired_at_ms": None,
        "last_execution_id": None,
        "last_status": None,
        "last_finished_at_ms": None,
        "created_at_ms": at,
        "created_by": event.by,
        "updated_at_ms": at,
        "updated_by": None,
        "version": event.originator_version,
        "source": event.source,
    }


def _operator_change(row: Row, event: Any, status: str, next_fire: datetime | None) -> None:  # noqa: ANN401 (a job event)
    row.update(
        status=status,
        next_fire_at_ms=_ms(next_fire),
        updated_at_ms=to_ms(event.timestamp),
        updated_by=event.by,
    )


def _job_updated(row: Row, event: Job.Updated) -> None:
    row.update(_definition_columns(event.definition))
    _operator_change(row, event, row["status"], event.next_fire_at)


def _job_paused(row: Row, event: Job.Paused) -> None:
    _operator_change(row, event, "paused", None)


def _job_resumed(row: Row, event: Job.Resumed) -> None:
    _operator_change(row, event, "active", event.next_fire_at)


def _job_deleted(row: Row, event: Job.Deleted) -> None:
    _operator_change(row, event, "deleted", None)


def _job_fired(row: Row, event: Job.Fired) -> None:
    row.update(next_fire_at_ms=_ms(event.next_fire_at), last_fired_at_ms=to_ms(event.timestamp))


def _job_fires_missed(row: Row, event: Job.FiresMissed) -> None:
    row["next_fire_at_ms"] = _ms(event.next_fire_at)


def _job_triggered(row: Row, event: Job.Triggered) -> None:
    row["last_fired_at_ms"] = to_ms(event.timestamp)


def _job_backfilled(_row: Row, _event: Job.Backfilled) -> None:
    """The request itself changes no column: its fires and misses follow it."""


_JOB_CHANGES: dict[type[Any], Callable[[Row, Any], None]] = {
    Job.Updated: _job_updated,
    Job.Paused: _job_paused,
    Job.Resumed: _job_resumed,
    Job.Deleted: _job_deleted,
    Job.Fired: _job_fired,
    Job.FiresMissed: _job_fires_missed,
    Job.Triggered: _job_triggered,
    Job.Backfilled: _job_backfilled,
}
JOB_EVENTS = frozenset({Job.Scheduled, *_JOB_CHANGES})


# ---- folding execution events -----------------------------------------------------


def _spec_read(names: tuple[str, ...]) -> type[msgspec.Struct]:
    """A struct of the fields ``names`` of a run's spec, typed and defaulted as
    ``ExecutionSpec`` declares them (none of them takes a default factory), and its
    payload as the JSON text it is stored as, not decoded."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (f.name, f.type) if f.required else (f.name, f.type, f.default)
        for f in msgspec.structs.fields(ExecutionSpec)
        if f.name in names
    ]
    fields.append(("payload", msgspec.Raw, msgspec.Raw(b"{}")))
    return msgspec.defstruct("SpecRead", fields, kw_only=True)


# What the fold reads of a run's spec (not its timeout or limits; its payload as text).
_SpecRead = _spec_read(("handler", "queue", "priority", "retry"))

# How much of a run's input, result and last error a search reads (ADR 107).
SEARCHED_CHARS = 2000


def _payload_text(payload: Any) -> str:  # noqa: ANN401 (a payload, or its JSON text as read)
    """The run's input as a search reads it: JSON text, cut, lower-cased."""
    raw = bytes(payload) if isinstance(payload, msgspec.Raw) else msgspec.json.encode(payload)
    return raw[: SEARCHED_CHARS * 4].decode(errors="replace")[:SEARCHED_CHARS].lower()


def _index_for_search(row: Row) -> None:
    """What a search of runs matches: the handler, input, result and last error."""
    parts = (row["payload_text"], row["result"], row["last_error"])
    text = "\n".join(p[:SEARCHED_CHARS] for p in parts if p)
    row["search_text"] = f"{row['handler']}\n{text}".lower()


_ENQUEUED_READ = (
    "timestamp", "job_id", "spec", "trigger", "scheduled_for", "ready_at", "attempt", "by", "via",
)  # fmt: skip
# What the fold reads of the events most runs have (``EventView``): the rest of their
# state is skipped rather than decoded. A result stays the JSON text its column holds,
# a lease id and a job id the text their columns hold.
FOLD_VIEWS = (
    EventView(
        Execution.Enqueued,
        _ENQUEUED_READ,
        {"spec": _SpecRead, "job_id": str | None},
    ),
    EventView(
        Execution.Leased, ("timestamp", "attempt", "worker_id", "lease_id"), {"lease_id": str}
    ),
    EventView(Execution.Completed, ("timestamp", "duration", "result"), {"result": msgspec.Raw}),
)
# The fold takes each view's struct for its event's class.
_ENQUEUED_VIEW, _LEASED_VIEW, _COMPLETED_VIEW = (view.struct for view in FOLD_VIEWS)
CREATIONS = (Execution.Enqueued, Execution.Skipped, _ENQUEUED_VIEW)


# A new execution's row before its enqueueing sets anything: copied for each one, which
# costs less than building a row of 26 columns anew.
_NEW_EXECUTION = dict.fromkeys(EXECUTION_COLUMNS)


def _enqueued_row(key: str, event: Execution.Enqueued | Execution.Skipped) -> Row:
    """The row of a new execution; ``key``: its id as text (the fold's key)."""
    spec = event.spec
    row = _NEW_EXECUTION.copy()
    row["id"] = key
    row["job_id"] = None if event.job_id is None else _job_text(event.job_id)
    row["handler"] = spec.handler
    row["queue"] = spec.queue
    row["priority"] = spec.priority
    row["trigger"] = event.trigger.value
    row["status"] = _PENDING
    row["attempt"] = event.attempt
    row["max_attempts"] = row["attempt_budget"] = spec.retry.max_attempts
    row["scheduled_for_ms"] = _ms(event.scheduled_for)
    row["enqueued_at_ms"] = to_ms(event.timestamp)
    row["ready_at_ms"] = to_ms(event.ready_at)
    row["version"] = event.originator_version
    row["payload_text"] = _payload_text(spec.payload)
    if isinstance(event, Execution.Skipped):
        return row  # decided by the system, asked for by nobody
    row["enqueued_by"] = event.by
    row["enqueued_via"] = event.via
    return row


def _skipped_row(key: str, event: Execution.Skipped) -> Row:
    """A decided-skipped occurrence: never ran, finished when it was decided."""
    at = to_ms(event.timestamp)
    row = _enqueued_row(key, event)
    row.update(
        status=_SKIPPED,
        finished_at_ms=at,
        last_error=event.reason,
        closed_by="system",
        closed_reason=event.reason,
    )
    return row


class Fold:
    """The rows one page touches: read before the fold, changed by it, written after."""

    def __init__(
        self,
        jobs: dict[str, Row],
        executions: dict[str, Row],
        workflows: dict[str, Row] | None = None,
    ) -> None:
        self.jobs = jobs
        self.executions = executions
        self.workflows = WorkflowRows(workflows)
        self.attempts: dict[tuple[str, int], Row] = {}
        self.changed_jobs: set[str] = set()
        self.changed_executions: set[str] = set()
        self.changed_attempts: set[tuple[str, int]] = set()
        self.stats: defaultdict[int, list[int]] = defaultdict(lambda: [0] * len(STAT_COLUMNS))
        self.histograms: Counter[tuple[int, str, int]] = Counter()
        self.status_counts: Counter[tuple[str, str]] = Counter()

    def apply(self, key: str, event: Any) -> None:  # noqa: ANN401 (any followed event)
        """Fold ``event`` of the aggregate whose id is ``key``."""
        kind = type(event)
        if kind in JOB_EVENTS:
            self._job_event(key, event)
        elif kind in EXECUTION_EVENTS:
            self.execution_event(key, event)
        elif kind in WORKFLOW_EVENTS:
            self.workflows.apply(key, event)

    def _job_event(self, key: str, event: Any) -> None:  # noqa: ANN401 (a job event)
        row = self.jobs.get(key)
        if row is not None and event.originator_version <= row["version"]:
            return  # folded before: a page applied again
        before = None if row is None else row["status"]
        if isinstance(event, Job.Scheduled):
            self.jobs[key] = _scheduled_row(event)
        elif row is None:
            log.warning("read_models.unknown_job", job_id=key, version=event.originator_version)
            return
        else:
            _JOB_CHANGES[type(event)](row, event)
            row["version"] = event.originator_version
        self.changed_jobs.add(key)
        self._moved(JOB_KIND, before, self.jobs[key]["status"])

    def execution_event(self, key: str, event: Any) -> None:  # noqa: ANN401 (an execution event)
        """Fold ``event``, of the execution whose id is ``key``."""
        row = self.executions.get(key)
        if row is not None and event.originator_version <= row["version"]:
            return  # folded before: a page applied again
        change = _EXECUTION_CHANGES.get(type(event))
        if change is None:  # a creation
            self._create_execution(key, event, row)
            return
        if row is None:
            log.warning(
                "read_models.unknown_execution", execution_id=key, version=event.originator_version
            )
            return
        before = row["status"]
        searched = (row["payload_text"], row["result"], row["last_error"])
        change(self, row, event)
        row["version"] = event.originator_version
        if searched != (row["payload_text"], row["result"], row["last_error"]):
            _index_for_search(row)  # most events (a lease, progress) change none of them
        self.changed_executions.add(key)
        if before != row["status"]:
            self._moved(EXECUTION_KIND, before, row["status"])
        self._update_job(row, latest=False)

    def _create_execution(
        self,
        key: str,
        event: Execution.Enqueued | Execution.Skipped,
        replaced: Row | None,
    ) -> None:
        if isinstance(event, Execution.Skipped):
            row = self.executions[key] = _skipped_row(key, event)
        else:  # enqueued, or the fold's view of it
            row = self.executions[key] = _enqueued_row(key, event)
            self.count(row["enqueued_at_ms"], FIRED)
        _index_for_search(row)
        self.changed_executions.add(key)
        self._moved(EXECUTION_KIND, None if replaced is None else replaced["status"], row["status"])
        self._update_job(row, latest=True)

    def _moved(self, kind: str, before: str | None, after: str) -> None:
        if before != after:
            if before is not None:
                self.status_counts[kind, before] -= 1
            self.status_counts[kind, after] += 1

    def _update_job(self, execution: Row, *, latest: bool) -> None:
        """Keep the job's last execution (the latest enqueued) and its status current."""
        job = None if execution["job_id"] is None else self.jobs.get(execution["job_id"])
        if job is None:
            return
        if latest:
            job["last_execution_id"] = execution["id"]
        if job["last_execution_id"] == execution["id"]:
            job["last_status"] = execution["status"]
            job["last_finished_at_ms"] = execution["finished_at_ms"]
            self.changed_jobs.add(job["id"])

    # ---- attempts and statistics ----------------------------------------------------

    def start_attempt(self, execution: Row, event: Execution.Leased, at_ms: int) -> None:
        key = (execution["id"], event.originator_version)
        self.attempts[key] = {
            "execution_id": execution["id"],
            "seq": event.originator_version,
            "attempt": event.attempt,
            "worker_id": event.worker_id,
            "lease_id": execution["lease_id"],
            "started_at_ms": at_ms,
            "finished_at_ms": None,
            "outcome": None,
            "error": None,
            "duration_ms": None,
        }
        self.changed_attempts.add(key)

    def settle_attempt(
        self,
        execution: Row,
        event: Any,  # noqa: ANN401 (an execution event)
        outcome: str,
        error: str | None,
        duration_ms: float | None = None,
        *,
        at_ms: int | None = None,
    ) -> None:
        """Record how the current lease ended, unless an earlier event already did
        (``at_ms``: the event's time, when the caller has it already)."""
        key = (execution["id"], execution["lease_seq"])
        attempt = self.attempts.get(key)
        if attempt is None:
            return
        if attempt["outcome"] is None:
            at = to_ms(event.timestamp) if at_ms is None else at_ms
            if duration_ms is None:
                duration_ms = float(at - attempt["started_at_ms"])
            attempt["outcome"] = outcome
            attempt["error"] = error
            attempt["finished_at_ms"] = at
            attempt["duration_ms"] = duration_ms
            self.changed_attempts.add(key)
        execution["duration_ms"] = attempt["duration_ms"]

    def count(self, at_ms: int, stat: int) -> None:
        self.stats[minute_of(at_ms)][stat] += 1

    def observe(self, at_ms: int, metric: str, value_ms: float) -> None:
        self.histograms[minute_of(at_ms), metric, bucket_of(value_ms)] += 1


def _leased(fold: Fold, row: Row, event: Execution.Leased) -> None:
    at = to_ms(event.timestamp)
    if row["started_at_ms"] is None:
        due = row["scheduled_for_ms"]
        # A backfill's occurrence is in the past on purpose: it is late from its request.
        since = row["enqueued_at_ms"] if due is None or row["trigger"] == _BACKFILL else due
        lateness = float(at - since)
        row.update(started_at_ms=at, lateness_ms=lateness)
        fold.observe(at, LATENESS, lateness)
    # Item by item rather than through update(): this runs for every lease of a replay.
    row["status"] = _RUNNING
    row["attempt"] = event.attempt
    row["worker_id"] = event.worker_id
    row["lease_id"] = str(event.lease_id)
    row["lease_seq"] = event.originator_version
    row["progress"] = None  # a new attempt starts from nothing
    row["waiting"] = None
    fold.start_attempt(row, event, at)


def _debounced(_fold: Fold, row: Row, event: Execution.Debounced) -> None:
    row["ready_at_ms"] = to_ms(event.ready_at)
    row["payload_text"] = _payload_text(event.payload)


def _replaced(_fold: Fold, row: Row, event: Execution.Replaced) -> None:
    row["payload_text"] = _payload_text(event.payload)


def _brought_forward(_fold: Fold, row: Row, event: Execution.BroughtForward) -> None:
    # Due now: what it waited for (a back-off, a snooze, a deferral) is over.
    row.update(ready_at_ms=to_ms(event.ready_at), waiting=None)


def _throttled(_fold: Fold, row: Row, event: Execution.Throttled) -> None:
    row["waiting"] = f"waits for its {event.kind} limit {event.limit}"


def _progressed(_fold: Fold, row: Row, event: Execution.Progressed) -> None:
    shown = ProgressRow(
        percent=event.progress.percent,
        message=event.progress.message,
        data=event.progress.data,
        at=event.timestamp,
    )
    row["progress"] = msgspec.json.encode(shown).decode()


def _completed(fold: Fold, row: Row, event: Execution.Completed) -> None:
    at = to_ms(event.timestamp)
    duration = event.duration.total_seconds() * 1000
    fold.settle_attempt(row, event, "completed", None, duration, at_ms=at)
    row["status"] = _COMPLETED
    row["finished_at_ms"] = at
    row["lease_id"] = None
    row["result"] = _encoder.encode(event.result).decode()
    fold.count(at, COMPLETED)
    fold.observe(at, DURATION, duration)


def _retried(fold: Fold, row: Row, event: Execution.Retried) -> None:
    fold.settle_attempt(row, event, "retried", event.error)
    row.update(
        status=_PENDING,
        attempt=event.next_attempt,
        last_error=event.error,
        ready_at_ms=to_ms(event.ready_at),
        lease_id=None,
        waiting=f"back-off after attempt {event.next_attempt - 1} failed",
    )
    fold.count(to_ms(event.timestamp), FAILED)


def _dead_lettered(fold: Fold, row: Row, event: Execution.DeadLettered) -> None:
    at = to_ms(event.timestamp)
    fold.settle_attempt(row, event, "dead_lettered", event.error)
    row.update(
        status=_DEAD_LETTERED,
        attempt=event.attempts,
        last_error=event.error,
        finished_at_ms=at,
        lease_id=None,
    )
    fold.count(at, FAILED)
    fold.count(at, DEAD_LETTERED)


def _lease_expired(fold: Fold, row: Row, event: Execution.LeaseExpired) -> None:
    fold.settle_attempt(row, event, "lease_expired", LEASE_EXPIRED_ERROR)


def _deferred(fold: Fold, row: Row, event: Execution.Deferred) -> None:
    fold.settle_attempt(row, event, "deferred", event.reason)
    row.update(
        status=_PENDING,
        ready_at_ms=to_ms(event.ready_at),
        lease_id=None,
        waiting=f"deferred: {event.reason}",
    )


def _snoozed(fold: Fold, row: Row, event: Execution.Snoozed) -> None:
    # The attempt is given back: the row's attempt stays, the next lease is it again.
    fold.settle_attempt(row, event, "snoozed", event.reason)
    row.update(
        status=_PENDING,
        ready_at_ms=to_ms(event.ready_at),
        lease_id=None,
        waiting=f"snoozed: {event.reason}",
    )


def _requeued(_fold: Fold, row: Row, event: Execution.Requeued) -> None:
    # A fresh budget starts after the attempts used so far (as the aggregate counts
    # them). Rows folded before the budget column existed never had their
    # max_attempts moved, so it still is the budget there.
    budget = row["attempt_budget"] or row["max_attempts"]
    row.update(
        status=_PENDING,
        attempt=row["attempt"] + 1,
        max_attempts=row["attempt"] + budget,
        attempt_budget=budget,
        ready_at_ms=to_ms(event.ready_at),
        finished_at_ms=None,
        closed_by=event.by,
        closed_via=event.via,
        closed_reason=event.reason,
        waiting=None,
    )


def _closed(row: Row, event: Any, status: ExecutionStatus) -> None:  # noqa: ANN401 (an execution event)
    row.update(
        status=status.value,
        finished_at_ms=to_ms(event.timestamp),
        lease_id=None,
        closed_by=event.by,
        closed_via=event.via,
        closed_reason=event.reason,
    )


def _cancelled(fold: Fold, row: Row, event: Execution.Cancelled) -> None:
    if row["lease_id"] is not None:
        fold.settle_attempt(row, event, "cancelled", event.reason)
    _closed(row, event, ExecutionStatus.CANCELLED)


def _discarded(fold: Fold, row: Row, event: Execution.Discarded) -> None:
    if event.lease_id is not None:  # its handler discarded it: the attempt ends so
        fold.settle_attempt(row, event, "discarded", event.reason)
        row["last_error"] = event.reason
    _closed(row, event, ExecutionStatus.DISCARDED)


# Who the row says closed a run not started by its expires_at.
EXPIRED_BY = "system"


def _expired(_fold: Fold, row: Row, event: Execution.Expired) -> None:
    row.update(
        status=ExecutionStatus.DISCARDED.value,
        finished_at_ms=to_ms(event.timestamp),
        last_error=expiry_reason(event.expires_at),
        closed_by=EXPIRED_BY,
        closed_reason=expiry_reason(event.expires_at),
    )


_EXECUTION_CHANGES: dict[type[Any], Callable[[Fold, Row, Any], None]] = {
    Execution.Leased: _leased,
    Execution.Completed: _completed,
    Execution.Retried: _retried,
    Execution.DeadLettered: _dead_lettered,
    Execution.LeaseExpired: _lease_expired,
    Execution.Deferred: _deferred,
    Execution.Requeued: _requeued,
    Execution.Cancelled: _cancelled,
    Execution.Discarded: _discarded,
    Execution.Snoozed: _snoozed,
    Execution.Expired: _expired,
    Execution.Progressed: _progressed,
    Execution.Replaced: _replaced,
    Execution.Throttled: _throttled,
    Execution.Debounced: _debounced,
    Execution.BroughtForward: _brought_forward,
    _LEASED_VIEW: _leased,
    _COMPLETED_VIEW: _completed,
}
EXECUTION_EVENTS = frozenset({*CREATIONS, *_EXECUTION_CHANGES})


def touched(events: Sequence[tuple[str, Any]]) -> tuple[set[str], set[str]]:
    """The ids of the jobs and of the executions whose rows ``events`` (with their ids)
    change; a job's own rows beside an execution's are found through its row (a
    workflow's, by ``touched_workflows``)."""
    job_ids: set[str] = set()
    execution_ids: set[str] = set()
    for key, event in events:
        if type(event) in JOB_EVENTS:
            job_ids.add(key)
        elif type(event) not in WORKFLOW_EVENTS:
            execution_ids.add(key)
            created = isinstance(event, CREATIONS)
            if created and event.job_id is not None:
                job_ids.add(str(event.job_id))
    return job_ids, execution_ids


class ReadModelTables(Protocol):
    """The read-model tables as the follower, the archive and the cleanup change them.
    Those taking a ``cursor`` work in its transaction (a page's, beside its position)."""

    def read_fold(self, cursor: Cursor, events: Sequence[tuple[str, Any]]) -> Fold:
        """A fold holding the stored rows that ``events`` (with their ids) touch, and
        the attempt each of their executions' latest lease made."""
        ...

    def write_fold(self, cursor: Cursor, fold: Fold) -> None:
        """Write the rows ``fold`` changed, and add its counts to the stored ones (a
        status count that reaches 0 is gone)."""
        ...

    def clear(self, cursor: Cursor) -> None:
        """Empty every table (a replay into them from the log's start)."""
        ...

    def forget_executions(self, cursor: Cursor, execution_ids: Sequence[str]) -> int:
        """Delete the rows of ``execution_ids`` (archived: their events left the log)
        with their attempts and status counts; returns how many rows there were.
        Per-minute statistics stay."""
        ...

    def prune_finished(self, *, before: datetime) -> int:
        """Delete, in a transaction of its own, executions that reached a final status
        before ``before``, with their attempts; returns how many executions.
        Per-minute statistics stay."""
        ...

    # A rebuild's new tables (``<table>_rebuild``, ``read_model_replay``).

    def create_rebuilt(self, cursor: Cursor) -> None:
        """Create the new tables, empty and without indexes, in place of any that a
        rebuild which died left."""
        ...

    def drop_rebuilt(self, cursor: Cursor) -> None:
        """Drop the new tables that exist."""
        ...

    def take_back_rebuilt(
        self, cursor: Cursor, execution_ids: Sequence[str]
    ) -> tuple[list[Row], list[Row]]:
        """The new tables' rows of ``execution_ids`` and the attempt each one's latest
        lease made, taken out of them (events came after they were written)."""
        ...
