"""Queries on the read models for the REST API and the dashboard.

Every function takes the projection ``Database`` first, reads one consistent snapshot
and returns msgspec structs; every datetime is zone-aware UTC. Lists are pages: the
items, the total that matched, the limit (clamped to 1..``MAX_LIMIT``) and offset
that were used, and a cursor for the page after it when there is one. A cursor is
the sort key of a page's last row (keyset paging on the order the list already has):
the next page starts after that row, so rows added or removed meanwhile neither
repeat nor skip one. A list filtered by status alone (or not at all) takes its total
from the status counts the projection keeps, so it counts no rows.

The percentiles of ``MinuteStats`` come from the per-minute histograms that the
projection keeps (``read_models``): each is the nearest-rank percentile of that
minute's values to within ``RELATIVE_ERROR`` (2 %), and they stay when old executions
are pruned. Lateness counts in the minute an execution first started, duration (of
completed attempts) in the minute it completed.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from jobledger.domain.definitions import JobDefinition
from jobledger.domain.execution import ExecutionStatus
from jobledger.domain.instants import RANGE_TEXT, holds_ms
from jobledger.projections.database import Cursor, Database, chunked
from jobledger.projections.read_models.pages import CursorError, decode_cursor, encode_cursor
from jobledger.projections.read_models.tables import (
    ATTEMPTS,
    DURATION,
    EXECUTION_KIND,
    EXECUTIONS,
    HISTOGRAMS,
    JOB_KIND,
    JOBS,
    LATENESS,
    MINUTE_STATS,
    STATUS_COUNTS,
    bucket_value,
    minute_of,
)
from jobledger.projections.times import from_ms, to_ms
from jobledger.schemas.jobs import JobIn
from jobledger.schemas.rows import (
    AttemptRow,
    ExecutionRow,
    JobRow,
    MinuteStats,
    Page,
    ProgressRow,
)

__all__ = [
    "JOB_STATUSES",
    "MAX_LIMIT",
    "AttemptRow",
    "CursorError",
    "ExecutionRow",
    "JobRow",
    "MinuteStats",
    "Page",
    "execution_statuses",
    "get_execution",
    "get_job",
    "list_attempts",
    "list_dead_letters",
    "list_executions",
    "list_jobs",
    "minute_stats",
    "status_counts",
]

MAX_LIMIT = 1000
_ID_CHUNK = 500  # ids per IN (...) list, well below SQLite's parameter limit
MAX_STATS_MINUTES = 7 * 24 * 60
JOB_STATUSES = ("active", "paused", "deleted")
_PERCENTILES = (0.5, 0.95, 0.99)


# ---- rows -------------------------------------------------------------------------


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

    def definition(self, stored: str | None, present: "Present") -> JobIn | None:
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


_JOB_SELECT = (
    "SELECT id, name, handler, queue, priority, schedule_kind, cron, timezone, run_at_ms, "  # noqa: S608 (constant names)
    "status, next_fire_at_ms, last_fired_at_ms, last_execution_id, last_status, "
    "last_finished_at_ms, created_at_ms, created_by, updated_at_ms, updated_by, version, "
    f"definition, source FROM {JOBS}"
)


# How a list shows a stored definition: in the shape the API takes (the use cases give
# the mapping; this layer knows only the stored form).
Present = Callable[[JobDefinition], JobIn]


def _job(row: Sequence[Any], present: Present) -> JobRow:
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


_EXECUTION_SELECT = (
    "SELECT e.id, e.job_id, j.name, e.handler, e.queue, e.priority, e.trigger, e.status, "  # noqa: S608 (constant names)
    "e.attempt, e.max_attempts, e.scheduled_for_ms, e.enqueued_at_ms, e.ready_at_ms, "
    "e.started_at_ms, e.finished_at_ms, e.worker_id, e.last_error, e.duration_ms, "
    "e.lateness_ms, e.result, e.closed_by, e.closed_reason, e.version, e.progress, "
    "e.enqueued_by, e.enqueued_via, e.closed_via "
    f"FROM {EXECUTIONS} e LEFT JOIN {JOBS} j ON j.id = e.job_id"
)


def _execution(row: Sequence[Any]) -> ExecutionRow:
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


_ATTEMPT_SELECT = (
    "SELECT execution_id, attempt, worker_id, lease_id, started_at_ms, finished_at_ms, "  # noqa: S608 (constant names)
    f"outcome, error, duration_ms FROM {ATTEMPTS} WHERE execution_id = ? ORDER BY seq"
)


def _attempt(row: Sequence[Any]) -> AttemptRow:
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


# ---- filters and pages ------------------------------------------------------------


class _Where:
    """A WHERE clause built from the filters that were given."""

    def __init__(self, *clauses: str) -> None:
        self._clauses = list(clauses)
        self.params: list[Any] = []

    def add(self, clause: str, value: object) -> None:
        if value is not None:
            self._clauses.append(clause)
            self.params.append(value)

    def also(self, clause: str, values: Sequence[object]) -> "_Where":
        """These filters and ``clause`` (with a placeholder per value)."""
        more = _Where(*self._clauses, clause)
        more.params = [*self.params, *values]
        return more

    @property
    def sql(self) -> str:
        return f" WHERE {' AND '.join(self._clauses)}" if self._clauses else ""


def _contains_pattern(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True)
class _Keyset:
    """A list's order as a cursor needs it: the comparison that selects the rows after
    a given one (``after``, with a placeholder per value) and that row's values."""

    kind: str
    after: str
    # The cursor's values, from the stored row (which a page shows even where it
    # cannot present one of its values).
    values: Callable[[Sequence[Any]], list[str | int]]

    def encode(self, row: Sequence[Any]) -> str:
        return encode_cursor(self.kind, self.values(row))

    def decode(self, cursor: str) -> list[str | int]:
        return decode_cursor(cursor, self.kind, self.after.count("?"))


def _page(
    db: Database,
    *,
    select: str,
    table: str,
    where: _Where,
    order: tuple[str, _Keyset],
    convert: Callable[[Sequence[Any]], JobRow | ExecutionRow],
    limit: int,
    offset: int,
    cursor: str | None = None,
    counted: tuple[str, str | None] | None = None,
) -> Page:
    """A page and its total. ``counted`` (kind, status or None for all) says that the
    filters select exactly the rows of that status count, which then is the total.
    With a ``cursor`` the page starts after the row it names (and ``offset`` is 0)."""
    limit = min(max(limit, 1), MAX_LIMIT)
    offset = max(offset, 0)
    sort, keyset = order
    rows_where = where
    if cursor is not None:
        offset = 0
        rows_where = where.also(keyset.after, keyset.decode(cursor))
    with db.transaction(snapshot=True) as sql:
        if counted is None:
            sql.execute(f"SELECT count(*) FROM {table}{where.sql}", where.params)  # noqa: S608 (constant names, bound values)
        else:
            _select_counted(sql, *counted)
        total = int(sql.fetchone()[0])
        # One row more than asked tells whether a page follows.
        sql.execute(
            f"{select}{rows_where.sql} ORDER BY {sort} LIMIT ? OFFSET ?",
            [*rows_where.params, limit + 1, offset],
        )
        rows = sql.fetchmany(limit + 1)
    items = [convert(row) for row in rows[:limit]]
    following = keyset.encode(rows[limit - 1]) if len(rows) > limit else None
    return Page(items=items, total=total, limit=limit, offset=offset, next_cursor=following)


def _none(*filters: object) -> bool:
    return all(f is None for f in filters)


def _select_counted(cursor: Cursor, kind: str, status: str | None) -> None:
    where = _Where()
    where.add("kind = ?", kind)
    where.add("status = ?", status)
    cursor.execute(f"SELECT coalesce(sum(count), 0) FROM {STATUS_COUNTS}{where.sql}", where.params)  # noqa: S608 (constant names, bound values)


def _all(cursor: Cursor) -> list[Any]:
    rows: list[Any] = []
    while batch := cursor.fetchmany(1000):
        rows.extend(batch)
    return rows


def _fetch_one(db: Database, sql: str, params: Sequence[Any]) -> Sequence[Any] | None:
    with db.transaction(snapshot=True) as cursor:
        cursor.execute(sql, params)
        row: Sequence[Any] | None = cursor.fetchone()
    return row


# ---- jobs -------------------------------------------------------------------------


# The job order (by name, ignoring case) and the rows after a cursor's; lower() is
# applied to the cursor's name in SQL, so it folds case as the order does.
_JOB_ORDER = (
    "lower(name), name, id",
    _Keyset(
        "jobs", "(lower(name), name, id) > (lower(?), ?, ?)", lambda r: [r[1], r[1], str(r[0])]
    ),
)


def _latest_first(kind: str, column: str) -> tuple[str, _Keyset]:
    """Executions by the time in ``column``, the latest first."""
    selected = _EXECUTION_SELECT.split(" FROM ", 1)[0].removeprefix("SELECT ").split(",")
    index = [name.strip() for name in selected].index(f"e.{column}")
    return (
        f"e.{column} DESC, e.id DESC",
        _Keyset(
            kind,
            f"(e.{column}, e.id) < (?, ?)",
            lambda row: [int(row[index]), str(row[0])],
        ),
    )


_EXECUTION_ORDER = _latest_first("executions", "enqueued_at_ms")
# A dead letter has always finished (it died then).
_DEAD_LETTER_ORDER = _latest_first("dead_letters", "finished_at_ms")


def list_jobs(
    db: Database,
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
    """Jobs by name (ignoring case); ``search`` matches part of the name, ignoring case;
    ``source`` is "code" for the jobs `jobledger apply` manages, "api" for the others."""
    where = _Where()
    where.add("status = ?", status)
    where.add("handler = ?", handler)
    where.add("queue = ?", queue)
    where.add("source = ?", source)
    where.add("lower(name) LIKE ? ESCAPE '\\'", _contains_pattern(search) if search else None)
    return _page(
        db,
        select=_JOB_SELECT,
        table=JOBS,
        where=where,
        order=_JOB_ORDER,
        convert=lambda row: _job(row, present),
        limit=limit,
        offset=offset,
        cursor=cursor,
        counted=(JOB_KIND, status) if _none(handler, queue, search, source) else None,
    )


def get_job(db: Database, job_id: UUID, *, present: Present) -> JobRow | None:
    row = _fetch_one(db, f"{_JOB_SELECT} WHERE id = ?", (str(job_id),))
    return None if row is None else _job(row, present)


# ---- executions -------------------------------------------------------------------


def list_executions(
    db: Database,
    *,
    status: str | None = None,
    job_id: UUID | None = None,
    queue: str | None = None,
    handler: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
    offset: int = 0,
    cursor: str | None = None,
) -> Page:
    """Executions enqueued in [since, until), newest first."""
    where = _Where()
    where.add("e.status = ?", status)
    where.add("e.job_id = ?", None if job_id is None else str(job_id))
    where.add("e.queue = ?", queue)
    where.add("e.handler = ?", handler)
    where.add("e.enqueued_at_ms >= ?", None if since is None else to_ms(since))
    where.add("e.enqueued_at_ms < ?", None if until is None else to_ms(until))
    counted = (EXECUTION_KIND, status) if _none(job_id, queue, handler, since, until) else None
    return _executions_page(
        db, where, order=_EXECUTION_ORDER, paging=(limit, offset, cursor), counted=counted
    )


def _executions_page(
    db: Database,
    where: _Where,
    *,
    order: tuple[str, _Keyset],
    paging: tuple[int, int, str | None],
    counted: tuple[str, str | None] | None,
) -> Page:
    limit, offset, cursor = paging
    return _page(
        db,
        select=_EXECUTION_SELECT,
        table=f"{EXECUTIONS} e",
        where=where,
        order=order,
        convert=_execution,
        limit=limit,
        offset=offset,
        cursor=cursor,
        counted=counted,
    )


def get_execution(db: Database, execution_id: UUID) -> ExecutionRow | None:
    row = _fetch_one(db, f"{_EXECUTION_SELECT} WHERE e.id = ?", (str(execution_id),))
    return None if row is None else _execution(row)


def execution_statuses(db: Database, execution_ids: Sequence[UUID]) -> dict[UUID, tuple[str, int]]:
    """The status and version of each execution the read model has (those it lacks are
    left out), in one snapshot: one query per 500 ids, however many ask."""
    found: dict[UUID, tuple[str, int]] = {}
    wanted = [str(i) for i in execution_ids]
    with db.transaction(snapshot=True) as cursor:
        for chunk in chunked(wanted, _ID_CHUNK):
            cursor.execute_in(f"SELECT id, status, version FROM {EXECUTIONS} WHERE id IN", chunk)  # noqa: S608 (constant names, bound values)
            found.update((UUID(row[0]), (row[1], int(row[2]))) for row in _all(cursor))
    return found


def list_attempts(db: Database, execution_id: UUID) -> list[AttemptRow]:
    """Every lease of the execution in order, deferrals included."""
    with db.transaction(snapshot=True) as cursor:
        cursor.execute(_ATTEMPT_SELECT, (str(execution_id),))
        rows = _all(cursor)
    return [_attempt(row) for row in rows]


def list_dead_letters(
    db: Database,
    *,
    queue: str | None = None,
    handler: str | None = None,
    job_id: UUID | None = None,
    error_contains: str | None = None,
    limit: int = 50,
    offset: int = 0,
    cursor: str | None = None,
) -> Page:
    """Dead-lettered executions, the latest to die first. ``error_contains`` matches
    part of the last error, case and all (as ``jobledger dlq requeue`` does)."""
    # The status is a literal so that the partial index on dead letters applies.
    where = _Where("e.status = 'dead_lettered'")
    where.add("e.queue = ?", queue)
    where.add("e.handler = ?", handler)
    where.add("e.job_id = ?", None if job_id is None else str(job_id))
    # replace() is in both dialects and matches case-sensitively; LIKE differs between them.
    where.add("replace(e.last_error, ?, '') <> e.last_error", error_contains or None)
    unfiltered = _none(queue, handler, job_id, error_contains or None)
    counted = (EXECUTION_KIND, ExecutionStatus.DEAD_LETTERED.value) if unfiltered else None
    return _executions_page(
        db, where, order=_DEAD_LETTER_ORDER, paging=(limit, offset, cursor), counted=counted
    )


# ---- statistics -------------------------------------------------------------------


def minute_stats(db: Database, *, since: datetime, until: datetime) -> list[MinuteStats]:
    """One entry per minute from the minute of ``since`` up to ``until`` (exclusive),
    zeros where nothing happened. Raises ValueError past ``MAX_STATS_MINUTES``."""
    start, end = minute_of(to_ms(since)), to_ms(until)
    minutes = range(start, end, 60_000)
    if len(minutes) > MAX_STATS_MINUTES:
        raise ValueError(f"ask for at most {MAX_STATS_MINUTES} minutes (7 days) at a time")
    if not minutes:
        return []
    with db.transaction(snapshot=True) as cursor:
        counters = _counters(cursor, start, end)
        histograms = _histograms(cursor, start, end)
    return [_minute(minute, counters.get(minute), histograms.get(minute, {})) for minute in minutes]


def _counters(cursor: Cursor, start: int, end: int) -> dict[int, tuple[int, ...]]:
    cursor.execute(
        f"SELECT minute_ms, fired, completed, failed, dead_lettered FROM {MINUTE_STATS} "  # noqa: S608 (constant names)
        "WHERE minute_ms >= ? AND minute_ms < ?",
        (start, end),
    )
    return {int(row[0]): tuple(int(v) for v in row[1:]) for row in _all(cursor)}


def _histograms(
    cursor: Cursor, start: int, end: int
) -> dict[int, dict[str, list[tuple[int, int]]]]:
    """{minute: {metric: [(bucket, count), ...] in bucket order}}."""
    cursor.execute(
        f"SELECT minute_ms, metric, bucket, count FROM {HISTOGRAMS} "  # noqa: S608 (constant names)
        "WHERE minute_ms >= ? AND minute_ms < ? ORDER BY minute_ms, metric, bucket",
        (start, end),
    )
    found: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for minute, metric, bucket, count in _all(cursor):
        found.setdefault(int(minute), {}).setdefault(metric, []).append((int(bucket), int(count)))
    return found


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


def _minute(
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


def status_counts(db: Database) -> dict[str, dict[str, int]]:
    """{"jobs": {status: n}, "executions": {status: n}}, every status listed."""
    counts = {
        JOB_KIND: dict.fromkeys(JOB_STATUSES, 0),
        EXECUTION_KIND: dict.fromkeys((s.value for s in ExecutionStatus), 0),
    }
    with db.transaction(snapshot=True) as cursor:
        cursor.execute(f"SELECT kind, status, count FROM {STATUS_COUNTS}")  # noqa: S608 (constant names)
        for kind, status, count in _all(cursor):
            counts.setdefault(kind, {})[status] = int(count)
    return counts
