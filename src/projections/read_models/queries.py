"""Queries on the read models for the REST API and the dashboard: the
``ReadModelQueries`` port (its statements are the adapter's, ``adapters/sql/
read_model_queries.py``) and how a stored row becomes what a list shows.

Every query reads one consistent snapshot and returns msgspec structs; every datetime
is zone-aware UTC. Lists are pages: the items, the total that matched, the limit
(clamped to 1..``MAX_LIMIT``) and offset that were used, and a cursor for the page
after it when there is one. A cursor is the sort key of a page's last row (keyset
paging on the order the list already has): the next page starts after that row, so
rows added or removed meanwhile neither repeat nor skip one. A list filtered by status
alone (or not at all) takes its total from the status counts the projection keeps, so
it counts no rows.

The percentiles of ``MinuteStats`` come from the per-minute histograms that the
projection keeps (``read_models``): each is the nearest-rank percentile of that
minute's values to within ``RELATIVE_ERROR`` (2 %), and they stay when old executions
are pruned. Lateness counts in the minute an execution first started, duration (of
completed attempts) in the minute it completed.
"""

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import msgspec

from jobledger.domain.definitions import JobDefinition
from jobledger.domain.execution import ExecutionStatus
from jobledger.domain.instants import RANGE_TEXT, holds_ms
from jobledger.projections.read_models.pages import CursorError
from jobledger.projections.read_models.tables import (
    DURATION,
    EXECUTION_KIND,
    JOB_COLUMNS,
    JOB_KIND,
    LATENESS,
    bucket_value,
    minute_of,
)
from jobledger.projections.read_models.workflows import STEP_COLUMNS, WORKFLOW_COLUMNS
from jobledger.projections.times import from_ms, to_ms
from jobledger.schemas.jobs import JobIn
from jobledger.schemas.rows import (
    AttemptRow,
    DeadLetterGroup,
    ExecutionRow,
    JobRow,
    MinuteStats,
    Page,
    ProgressRow,
    RunCell,
    StepCounts,
    WorkflowRow,
)

__all__ = [
    "JOB_STATUSES",
    "MAX_LIMIT",
    "AttemptRow",
    "CursorError",
    "DeadLetterGroup",
    "ExecutionRow",
    "JobRow",
    "MinuteStats",
    "Page",
    "ReadModelQueries",
    "RunCell",
    "WorkflowRow",
]

MAX_LIMIT = 1000
MAX_STATS_MINUTES = 7 * 24 * 60
JOB_STATUSES = ("active", "paused", "deleted")
_PERCENTILES = (0.5, 0.95, 0.99)

# How a list shows a stored definition: in the shape the API takes (the use cases give
# the mapping; this layer knows only the stored form).
Present = Callable[[JobDefinition], JobIn]


# ---- the port ---------------------------------------------------------------------


class ReadModelQueries(Protocol):
    """The read models as the use cases query them, each query in one snapshot.

    ``cursor`` is the ``next_cursor`` of the page before (``offset`` is then 0); one
    that no page of the list handed out raises ``CursorError``."""

    def list_jobs(
        self,
        *,
        present: Present,
        status: str | None = None,
        handler: str | None = None,
        queue: str | None = None,
        search: str | None = None,
        source: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> Page:
        """Jobs by name (ignoring case); ``search`` matches part of the name, ignoring
        case; ``source`` is "code" for the jobs `jobledger apply` manages, "api" for
        the others."""
        ...

    def get_job(self, job_id: UUID, *, present: Present) -> JobRow | None: ...

    def list_executions(
        self,
        *,
        status: str | None = None,
        job_id: UUID | None = None,
        queue: str | None = None,
        handler: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        search: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> Page:
        """Executions enqueued in [since, until), newest first. ``search`` matches part
        of a run's handler, input, result or last error, or of its job's name, ignoring
        case, or the start of its id or its job's id (ADR 107)."""
        ...

    def get_execution(self, execution_id: UUID) -> ExecutionRow | None: ...

    def execution_statuses(self, execution_ids: Sequence[UUID]) -> dict[UUID, tuple[str, int]]:
        """The status and version of each execution the read model has (those it
        lacks are left out), in one snapshot."""
        ...

    def oldest_due(self, queue: str, *, now: datetime) -> datetime | None:
        """When the pending run of ``queue`` that has been due longest fell due; None
        if no run is due."""
        ...

    def list_attempts(self, execution_id: UUID) -> list[AttemptRow]:
        """Every lease of the execution in order, deferrals included."""
        ...

    def list_dead_letters(
        self,
        *,
        queue: str | None = None,
        handler: str | None = None,
        job_id: UUID | None = None,
        error_contains: str | None = None,
        search: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> Page:
        """Dead-lettered executions, the latest to die first. ``error_contains``
        matches part of the last error, case and all (as ``jobledger dlq requeue``
        does); ``search`` as for ``list_executions``."""
        ...

    def recent_runs(self, job_ids: Sequence[UUID], *, per_job: int) -> dict[UUID, list[RunCell]]:
        """Each job's latest ``per_job`` runs, the latest first (its history strip); a job
        with none is left out."""
        ...

    def dead_letter_groups(self, *, limit: int = 100) -> list[DeadLetterGroup]:
        """The dead letters grouped by job, handler and last error, the largest group
        first (then the latest to die): 22 runs that died of one error are one group."""
        ...

    def minute_stats(self, *, since: datetime, until: datetime) -> list[MinuteStats]:
        """One entry per minute from the minute of ``since`` up to ``until``
        (exclusive), zeros where nothing happened. Raises ValueError past
        ``MAX_STATS_MINUTES``."""
        ...

    def status_counts(self) -> dict[str, dict[str, int]]:
        """{"jobs": {status: n}, "executions": {status: n}}, every status listed."""
        ...

    def list_workflows(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> Page:
        """Workflows started in [since, until), the latest started first; ``name``
        matches the whole name, case and all (as ``queue`` and ``handler`` do)."""
        ...


# ---- rows -------------------------------------------------------------------------

# The columns of a stored row as the adapter selects it for each conversion, in order:
# a job's (as stored), an execution's with its job's name (``job_name``), an attempt's.
JOB_ROW = JOB_COLUMNS
EXECUTION_ROW = (
    "id", "job_id", "job_name", "handler", "queue", "priority", "trigger", "status",
    "attempt", "max_attempts", "scheduled_for_ms", "enqueued_at_ms", "ready_at_ms",
    "started_at_ms", "finished_at_ms", "worker_id", "last_error", "duration_ms",
    "lateness_ms", "result", "closed_by", "closed_reason", "version", "progress",
    "enqueued_by", "enqueued_via", "closed_via", "waiting",
)  # fmt: skip
ATTEMPT_ROW = (
    "execution_id", "attempt", "worker_id", "lease_id", "started_at_ms", "finished_at_ms",
    "outcome", "error", "duration_ms",
)  # fmt: skip

# What a row shows in place of a value it cannot present.
UNREADABLE = "(unreadable)"
# A stored value that cannot be turned into what a row shows.
_UNREADABLE_ERRORS = (ValueError, TypeError, OverflowError, msgspec.DecodeError)


class _Reading:
    """One stored row as the lists show it. A value that cannot be presented (a time
    outside the range of instants, JSON that does not decode) is shown as None and
    named in the row's ``unreadable``: one bad row never fails a page or a list."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def time(self, field: str, ms: object) -> datetime | None:
        if ms is None:
            return None
        try:
            value = int(str(ms))
        except ValueError:
            self._note(field, f"{ms!r} is not a time")
            return None
        if not holds_ms(value):
            self._note(field, f"{value} ms lies outside {RANGE_TEXT}")
            return None
        return from_ms(value)

    def json(self, field: str, text: str | None, kind: Any = Any) -> Any:  # noqa: ANN401 (of type ``kind``)
        if text is None:
            return None
        try:
            return msgspec.json.decode(text, type=kind)
        except msgspec.DecodeError as error:
            self._note(field, f"does not decode ({error})")
            return None

    def definition(self, stored: str | None, present: Present) -> JobIn | None:
        """A stored definition in the API's shape; None (and named) for one this release
        cannot read, so the row still lists with its columns."""
        if stored is None:
            return None
        try:
            return present(msgspec.json.decode(stored, type=JobDefinition))
        except (msgspec.DecodeError, ValueError) as error:
            self._note("definition", f"cannot be read ({error})")
            return None

    def _note(self, field: str, problem: str) -> None:
        self.problems.append(f"{field}: {problem}")

    @property
    def unreadable(self) -> str | None:
        return "; ".join(self.problems) or None


def _row_id(row: Sequence[Any]) -> UUID:
    """The id of a stored row (the nil id if even that is unreadable)."""
    try:
        return UUID(str(row[0]))
    except ValueError:
        return UUID(int=0)


def _uuid(text: str | None) -> UUID | None:
    return None if text is None else UUID(text)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def job_row(row: Sequence[Any], present: Present) -> JobRow:
    """A job as a list shows it, from a row of ``JOB_ROW`` columns."""
    try:
        return _job_row(row, present)
    except _UNREADABLE_ERRORS as error:
        return _job_placeholder(row, error)


def _job_row(row: Sequence[Any], present: Present) -> JobRow:
    (id_, name, handler, queue, priority, _kind, _cron, _timezone, _run_at, status) = row[:10]
    read = _Reading()
    definition = read.definition(row[20], present)
    return JobRow(
        id=UUID(id_),
        name=name,
        handler=handler,
        queue=queue,
        priority=int(priority),
        schedule=None if definition is None else definition.schedule,
        status=status,
        next_fire_at=read.time("next_fire_at", row[10]),
        last_fired_at=read.time("last_fired_at", row[11]),
        last_execution_id=_uuid(row[12]),
        last_status=row[13],
        last_finished_at=read.time("last_finished_at", row[14]),
        created_at=read.time("created_at", row[15]),
        created_by=row[16],
        updated_at=read.time("updated_at", row[17]),
        updated_by=row[18],
        version=int(row[19]),
        definition=definition,
        source=row[21],
        unreadable=read.unreadable,
    )


def _job_placeholder(row: Sequence[Any], error: Exception) -> JobRow:
    """A job row none of whose values can be trusted: its id and why."""
    return JobRow(
        id=_row_id(row),
        name=UNREADABLE,
        handler=UNREADABLE,
        queue=UNREADABLE,
        priority=0,
        schedule=None,
        status=UNREADABLE,
        next_fire_at=None,
        last_fired_at=None,
        last_execution_id=None,
        last_status=None,
        last_finished_at=None,
        created_at=None,
        created_by=UNREADABLE,
        updated_at=None,
        updated_by=None,
        version=0,
        definition=None,
        unreadable=f"row: {type(error).__name__}: {error}",
    )


def execution_row(row: Sequence[Any]) -> ExecutionRow:
    """An execution as a list shows it, from a row of ``EXECUTION_ROW`` columns."""
    try:
        return _execution_row(row)
    except _UNREADABLE_ERRORS as error:
        return _execution_placeholder(row, error)


def _execution_row(row: Sequence[Any]) -> ExecutionRow:
    read = _Reading()
    return ExecutionRow(
        id=UUID(row[0]),
        job_id=_uuid(row[1]),
        job_name=row[2],
        handler=row[3],
        queue=row[4],
        priority=int(row[5]),
        trigger=row[6],
        status=row[7],
        attempt=int(row[8]),
        max_attempts=int(row[9]),
        scheduled_for=read.time("scheduled_for", row[10]),
        enqueued_at=read.time("enqueued_at", row[11]),
        ready_at=read.time("ready_at", row[12]),
        started_at=read.time("started_at", row[13]),
        finished_at=read.time("finished_at", row[14]),
        worker_id=row[15],
        last_error=row[16],
        duration_ms=_float(row[17]),
        lateness_ms=_float(row[18]),
        result=read.json("result", row[19]),
        closed_by=row[20],
        closed_reason=row[21],
        version=int(row[22]),
        progress=read.json("progress", row[23], ProgressRow),
        enqueued_by=row[24],
        enqueued_via=row[25],
        closed_via=row[26],
        waiting=row[27],
        unreadable=read.unreadable,
    )


def _execution_placeholder(row: Sequence[Any], error: Exception) -> ExecutionRow:
    """An execution row none of whose values can be trusted: its id and why."""
    return ExecutionRow(
        id=_row_id(row),
        job_id=None,
        job_name=None,
        handler=UNREADABLE,
        queue=UNREADABLE,
        priority=0,
        trigger=UNREADABLE,
        status=UNREADABLE,
        attempt=0,
        max_attempts=0,
        scheduled_for=None,
        enqueued_at=None,
        ready_at=None,
        started_at=None,
        finished_at=None,
        worker_id=None,
        last_error=None,
        duration_ms=None,
        lateness_ms=None,
        result=None,
        closed_by=None,
        closed_reason=None,
        version=0,
        unreadable=f"row: {type(error).__name__}: {error}",
    )


def run_cell(row: Sequence[Any]) -> RunCell:
    """A cell from ``(id, status, enqueued_at_ms)``; a time it cannot read is None."""
    return RunCell(
        id=_row_id(row),
        status=str(row[1]),
        enqueued_at=_Reading().time("enqueued_at", row[2]),
    )


def dead_letter_group(row: Sequence[Any]) -> DeadLetterGroup:
    """A group from ``(job_id, job_name, handler, error, count, first_ms, last_ms)``; a
    job id or a time it cannot read is shown as None (the count still stands)."""
    read = _Reading()
    try:
        job_id = _uuid(row[0])
    except ValueError:
        job_id = None
    return DeadLetterGroup(
        job_id=job_id,
        job_name=row[1],
        handler=str(row[2]),
        error=row[3],
        count=int(row[4]),
        first_seen=read.time("first_seen", row[5]),
        last_seen=read.time("last_seen", row[6]),
    )


def attempt_row(row: Sequence[Any]) -> AttemptRow:
    """An attempt as a list shows it, from a row of ``ATTEMPT_ROW`` columns."""
    read = _Reading()
    try:
        lease_id, duration = _uuid(row[3]), _float(row[8])
    except _UNREADABLE_ERRORS as error:
        read.problems.append(f"row: {type(error).__name__}: {error}")
        lease_id, duration = None, None
    return AttemptRow(
        execution_id=_row_id(row),
        attempt=int(row[1]),
        worker_id=row[2],
        lease_id=lease_id,
        started_at=read.time("started_at", row[4]),
        finished_at=read.time("finished_at", row[5]),
        outcome=row[6],
        error=row[7],
        duration_ms=duration,
        unreadable=read.unreadable,
    )


# The columns of a stored workflow row, as the adapter selects them (as stored).
WORKFLOW_ROW = WORKFLOW_COLUMNS


def workflow_row(row: Sequence[Any]) -> WorkflowRow:
    """A workflow as a list shows it, from a row of ``WORKFLOW_ROW`` columns."""
    try:
        return _workflow_row(dict(zip(WORKFLOW_ROW, row, strict=True)))
    except _UNREADABLE_ERRORS as error:
        return _workflow_placeholder(row, error)


def _workflow_row(stored: dict[str, Any]) -> WorkflowRow:
    read = _Reading()
    counts = {status.value: int(stored[column]) for status, column in STEP_COLUMNS.items()}
    return WorkflowRow(
        id=UUID(stored["id"]),
        name=str(stored["name"]),
        status=str(stored["status"]),
        on_failure=str(stored["on_failure"]),
        step_counts=StepCounts(total=int(stored["steps_total"]), **counts),
        started_at=read.time("started_at", stored["started_at_ms"]),
        updated_at=read.time("updated_at", stored["updated_at_ms"]),
        ended_at=read.time("ended_at", stored["ended_at_ms"]),
        started_by=stored["started_by"],
        started_via=stored["started_via"],
        version=int(stored["version"]),
        unreadable=read.unreadable,
    )


def _workflow_placeholder(row: Sequence[Any], error: Exception) -> WorkflowRow:
    """A workflow row none of whose values can be trusted: its id and why."""
    return WorkflowRow(
        id=_row_id(row),
        name=UNREADABLE,
        status=UNREADABLE,
        on_failure=UNREADABLE,
        step_counts=StepCounts(
            total=0, waiting=0, released=0, completed=0, failed=0, cancelled=0, skipped=0
        ),
        started_at=None,
        updated_at=None,
        ended_at=None,
        started_by=None,
        started_via=None,
        version=0,
        unreadable=f"row: {type(error).__name__}: {error}",
    )


# ---- statistics -------------------------------------------------------------------


def stats_minutes(since: datetime, until: datetime) -> range:
    """The minutes (ms) that ``minute_stats`` shows, from the minute of ``since`` up to
    ``until`` (exclusive). Raises ValueError past ``MAX_STATS_MINUTES``."""
    minutes = range(minute_of(to_ms(since)), to_ms(until), 60_000)
    if len(minutes) > MAX_STATS_MINUTES:
        raise ValueError(f"ask for at most {MAX_STATS_MINUTES} minutes (7 days) at a time")
    return minutes


def _percentiles(buckets: list[tuple[int, int]]) -> list[float | None]:
    total = sum(count for _bucket, count in buckets)
    if not total:
        return [None] * len(_PERCENTILES)
    values: list[float | None] = []
    for share in _PERCENTILES:
        rank = max(1, math.ceil(share * total))
        seen = 0
        for bucket, count in buckets:
            seen += count
            if seen >= rank:
                values.append(bucket_value(bucket))
                break
    return values


def minute_row(
    minute: int, counters: tuple[int, ...] | None, histograms: dict[str, list[tuple[int, int]]]
) -> MinuteStats:
    fired, completed, failed, dead = counters or (0, 0, 0, 0)
    lateness = _percentiles(histograms.get(LATENESS, []))
    duration = _percentiles(histograms.get(DURATION, []))
    return MinuteStats(
        minute=from_ms(minute),
        fired=fired,
        completed=completed,
        failed=failed,
        dead_lettered=dead,
        lateness_p50_ms=lateness[0],
        lateness_p95_ms=lateness[1],
        lateness_p99_ms=lateness[2],
        duration_p50_ms=duration[0],
        duration_p95_ms=duration[1],
        duration_p99_ms=duration[2],
    )


def no_counts() -> dict[str, dict[str, int]]:
    """The status counts with every status at 0, for the stored ones to fill in."""
    return {
        JOB_KIND: dict.fromkeys(JOB_STATUSES, 0),
        EXECUTION_KIND: dict.fromkeys((s.value for s in ExecutionStatus), 0),
    }
