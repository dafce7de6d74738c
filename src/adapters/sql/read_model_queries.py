"""The read models' queries (``ReadModelQueries``) on the event store's database: the
lists with their filters, totals and keyset pages, one row by id, the statistics."""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from jobledger.domain.execution import ExecutionStatus
from jobledger.projections.database import Cursor, Database, chunked
from jobledger.projections.read_models.pages import decode_cursor, encode_cursor
from jobledger.projections.read_models.queries import (
    ATTEMPT_ROW,
    EXECUTION_ROW,
    JOB_ROW,
    MAX_LIMIT,
    WORKFLOW_ROW,
    AttemptRow,
    DeadLetterGroup,
    ExecutionRow,
    JobRow,
    MinuteStats,
    Page,
    Present,
    RunCell,
    WorkflowRow,
    attempt_row,
    dead_letter_group,
    execution_row,
    job_row,
    minute_row,
    no_counts,
    run_cell,
    stats_minutes,
    workflow_row,
)
from jobledger.projections.read_models.tables import (
    ATTEMPTS,
    EXECUTION_KIND,
    EXECUTIONS,
    HISTOGRAMS,
    ID_CHUNK,
    JOB_KIND,
    JOBS,
    MINUTE_STATS,
    STATUS_COUNTS,
)
from jobledger.projections.read_models.workflows import WORKFLOWS
from jobledger.projections.times import from_ms, to_ms

_JOB_SELECT = f"SELECT {', '.join(JOB_ROW)} FROM {JOBS}"  # noqa: S608 (constant names)
_EXECUTION_SELECT = (
    f"SELECT {', '.join('j.name' if c == 'job_name' else f'e.{c}' for c in EXECUTION_ROW)} "  # noqa: S608 (constant names)
    f"FROM {EXECUTIONS} e LEFT JOIN {JOBS} j ON j.id = e.job_id"
)
_ATTEMPT_SELECT = (
    f"SELECT {', '.join(ATTEMPT_ROW)} FROM {ATTEMPTS} WHERE execution_id = ? ORDER BY seq"  # noqa: S608 (constant names)
)

# One job's latest runs, through its (job_id, enqueued_at_ms, id) index; wrapped, so
# that several can be joined by UNION ALL in both dialects.
_RECENT_RUNS = (
    f"SELECT * FROM (SELECT id, status, enqueued_at_ms, job_id FROM {EXECUTIONS} "  # noqa: S608 (constant names)
    "WHERE job_id = ? ORDER BY enqueued_at_ms DESC, id DESC LIMIT ?) AS r"
)
_STRIP_JOBS = 100  # jobs per statement
# The status is a literal so that the index by status reads the pending runs only.
_OLDEST_DUE = (
    f"SELECT min(ready_at_ms) FROM {EXECUTIONS} "  # noqa: S608 (constant names)
    "WHERE status = 'pending' AND queue = ? AND ready_at_ms <= ?"
)
# The status is a literal so that the partial index on dead letters applies.
_DEAD_LETTER_GROUPS = (
    f"SELECT e.job_id, j.name, e.handler, e.last_error, count(*), min(e.finished_at_ms), "  # noqa: S608 (constant names)
    f"max(e.finished_at_ms) FROM {EXECUTIONS} e LEFT JOIN {JOBS} j ON j.id = e.job_id "
    "WHERE e.status = 'dead_lettered' GROUP BY e.job_id, j.name, e.handler, e.last_error "
    "ORDER BY count(*) DESC, max(e.finished_at_ms) DESC LIMIT ?"
)
_SELECT_STATUSES = f"SELECT id, status, version FROM {EXECUTIONS} WHERE id IN"  # noqa: S608 (constant names)
_WORKFLOW_SELECT = f"SELECT {', '.join(WORKFLOW_ROW)} FROM {WORKFLOWS}"  # noqa: S608 (constant names)


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

    def add_all(self, clause: str, values: Sequence[object]) -> None:
        """``clause``, with a placeholder per value."""
        self._clauses.append(clause)
        self.params.extend(values)

    def also(self, clause: str, values: Sequence[object]) -> "_Where":
        """These filters and ``clause`` (with a placeholder per value)."""
        more = _Where(*self._clauses, clause)
        more.params = [*self.params, *values]
        return more

    @property
    def sql(self) -> str:
        return f" WHERE {' AND '.join(self._clauses)}" if self._clauses else ""


# A search that is all hex digits and dashes (at least this many) may be the start of
# a run's or a job's id, matched as a prefix beside the text.
_ID_START = re.compile(r"[0-9a-f-]{4,36}")


# A search's job names: up to this many jobs are matched by their ids (one index read
# each beside the text's); a word in more names than this is matched by a subquery,
# which PostgreSQL answers by reading every run.
_NAMED_JOBS_MOST = 500
_JOBS_NAMED = (
    f"SELECT id FROM {JOBS} WHERE lower(name) LIKE ? ESCAPE '\\' LIMIT {_NAMED_JOBS_MOST + 1}"  # noqa: S608 (constant names)
)
_JOB_NAMED = f"e.job_id IN (SELECT j.id FROM {JOBS} j WHERE lower(j.name) LIKE ? ESCAPE '\\')"  # noqa: S608 (constant names)


def _search_terms(search: str | None) -> tuple[str, str] | None:
    """The search lower-cased, and its pattern for any part of a text; None for none."""
    term = (search or "").strip().lower()
    return (term, _contains_pattern(term)) if term else None


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
    index = EXECUTION_ROW.index(column)
    return (
        f"e.{column} DESC, e.id DESC",
        _Keyset(
            kind,
            f"(e.{column}, e.id) < (?, ?)",
            lambda row: [int(row[index]), str(row[0])],
        ),
    )


_EXECUTION_ORDER = _latest_first("executions", "enqueued_at_ms")
# Workflows by start, the latest first (through the indexes that end in it and the id).
_WORKFLOW_ORDER = (
    "started_at_ms DESC, id DESC",
    _Keyset(
        "workflows",
        "(started_at_ms, id) < (?, ?)",
        lambda row: [int(row[WORKFLOW_ROW.index("started_at_ms")]), str(row[0])],
    ),
)
# A dead letter has always finished (it died then).
_DEAD_LETTER_ORDER = _latest_first("dead_letters", "finished_at_ms")


class SqlReadModelQueries:
    """The read models' queries (``ReadModelQueries``) on the event store's database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def _page(
        self,
        *,
        select: str,
        table: str,
        where: _Where,
        order: tuple[str, _Keyset],
        convert: Callable[[Sequence[Any]], JobRow | ExecutionRow | WorkflowRow],
        paging: tuple[int, int, str | None],
        counted: tuple[str, str | None] | None = None,
    ) -> Page:
        """A page and its total. ``counted`` (kind, status or None for all) says that
        the filters select exactly the rows of that status count, which then is the
        total. With a cursor the page starts after the row it names (and the offset is
        0)."""
        limit, offset, cursor = paging
        limit = min(max(limit, 1), MAX_LIMIT)
        offset = max(offset, 0)
        sort, keyset = order
        rows_where = where
        if cursor is not None:
            offset = 0
            rows_where = where.also(keyset.after, keyset.decode(cursor))
        with self._database.transaction(snapshot=True) as sql:
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

    def _searched(self, where: _Where, search: str | None) -> None:
        """Runs whose handler, input, result or last error holds ``search`` (the fold
        keeps them lower-cased in ``search_text``), whose job's name holds it, or whose
        id or job's id starts with it (ADR 107). The jobs named are looked up first, so
        that each part is an index read PostgreSQL can join with OR."""
        terms = _search_terms(search)
        if terms is None:
            return
        term, contains = terms
        clauses = ["e.search_text LIKE ? ESCAPE '\\'"]
        values: list[object] = [contains]
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(_JOBS_NAMED, (contains,))
            named = [str(row[0]) for row in _all(cursor)]
        if len(named) > _NAMED_JOBS_MOST:
            clauses.append(_JOB_NAMED)
            values.append(contains)
        elif named:
            clauses.append(f"e.job_id IN ({', '.join('?' * len(named))})")
            values += named
        if _ID_START.fullmatch(term):
            clauses += ["e.id LIKE ?", "e.job_id LIKE ?"]
            values += [f"{term}%", f"{term}%"]
        where.add_all(f"({' OR '.join(clauses)})", values)

    def _fetch_one(self, sql: str, params: Sequence[Any]) -> Sequence[Any] | None:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(sql, params)
            row: Sequence[Any] | None = cursor.fetchone()
        return row

    # ---- jobs ---------------------------------------------------------------------

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
        where = _Where()
        where.add("status = ?", status)
        where.add("handler = ?", handler)
        where.add("queue = ?", queue)
        where.add("source = ?", source)
        where.add("lower(name) LIKE ? ESCAPE '\\'", _contains_pattern(search) if search else None)
        return self._page(
            select=_JOB_SELECT,
            table=JOBS,
            where=where,
            order=_JOB_ORDER,
            convert=lambda row: job_row(row, present),
            paging=(limit, offset, cursor),
            counted=(JOB_KIND, status) if _none(handler, queue, search, source) else None,
        )

    def get_job(self, job_id: UUID, *, present: Present) -> JobRow | None:
        row = self._fetch_one(f"{_JOB_SELECT} WHERE id = ?", (str(job_id),))
        return None if row is None else job_row(row, present)

    # ---- executions ---------------------------------------------------------------

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
        where = _Where()
        where.add("e.status = ?", status)
        where.add("e.job_id = ?", None if job_id is None else str(job_id))
        where.add("e.queue = ?", queue)
        where.add("e.handler = ?", handler)
        where.add("e.enqueued_at_ms >= ?", None if since is None else to_ms(since))
        where.add("e.enqueued_at_ms < ?", None if until is None else to_ms(until))
        self._searched(where, search)
        unfiltered = _none(job_id, queue, handler, since, until, search or None)
        counted = (EXECUTION_KIND, status) if unfiltered else None
        return self._executions_page(
            where, order=_EXECUTION_ORDER, paging=(limit, offset, cursor), counted=counted
        )

    def _executions_page(
        self,
        where: _Where,
        *,
        order: tuple[str, _Keyset],
        paging: tuple[int, int, str | None],
        counted: tuple[str, str | None] | None,
    ) -> Page:
        return self._page(
            select=_EXECUTION_SELECT,
            table=f"{EXECUTIONS} e",
            where=where,
            order=order,
            convert=execution_row,
            paging=paging,
            counted=counted,
        )

    def get_execution(self, execution_id: UUID) -> ExecutionRow | None:
        row = self._fetch_one(f"{_EXECUTION_SELECT} WHERE e.id = ?", (str(execution_id),))
        return None if row is None else execution_row(row)

    def execution_statuses(self, execution_ids: Sequence[UUID]) -> dict[UUID, tuple[str, int]]:
        # One query per ID_CHUNK ids, however many ask.
        found: dict[UUID, tuple[str, int]] = {}
        wanted = [str(i) for i in execution_ids]
        with self._database.transaction(snapshot=True) as cursor:
            for chunk in chunked(wanted, ID_CHUNK):
                cursor.execute_in(_SELECT_STATUSES, chunk)
                found.update((UUID(row[0]), (row[1], int(row[2]))) for row in _all(cursor))
        return found

    def oldest_due(self, queue: str, *, now: datetime) -> datetime | None:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(_OLDEST_DUE, (queue, to_ms(now)))
            row = cursor.fetchone()
        return None if row is None or row[0] is None else from_ms(int(row[0]))

    def list_attempts(self, execution_id: UUID) -> list[AttemptRow]:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(_ATTEMPT_SELECT, (str(execution_id),))
            rows = _all(cursor)
        return [attempt_row(row) for row in rows]

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
        # The status is a literal so that the partial index on dead letters applies.
        where = _Where("e.status = 'dead_lettered'")
        where.add("e.queue = ?", queue)
        where.add("e.handler = ?", handler)
        where.add("e.job_id = ?", None if job_id is None else str(job_id))
        # replace() is in both dialects and matches case-sensitively; LIKE differs
        # between them.
        where.add("replace(e.last_error, ?, '') <> e.last_error", error_contains or None)
        self._searched(where, search)
        unfiltered = _none(queue, handler, job_id, error_contains or None, search or None)
        counted = (EXECUTION_KIND, ExecutionStatus.DEAD_LETTERED.value) if unfiltered else None
        return self._executions_page(
            where, order=_DEAD_LETTER_ORDER, paging=(limit, offset, cursor), counted=counted
        )

    def recent_runs(self, job_ids: Sequence[UUID], *, per_job: int) -> dict[UUID, list[RunCell]]:
        found: dict[UUID, list[RunCell]] = {}
        limit = min(max(per_job, 1), MAX_LIMIT)
        with self._database.transaction(snapshot=True) as cursor:
            # A statement per slice of jobs: a bounded read of each job's index each.
            for chunk in chunked(list(job_ids), _STRIP_JOBS):
                sql = " UNION ALL ".join([_RECENT_RUNS] * len(chunk))
                params = [value for job_id in chunk for value in (str(job_id), limit)]
                cursor.execute(sql, params)
                for row in _all(cursor):
                    found.setdefault(UUID(str(row[3])), []).append(run_cell(row))
        return found

    def dead_letter_groups(self, *, limit: int = 100) -> list[DeadLetterGroup]:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(_DEAD_LETTER_GROUPS, (min(max(limit, 1), MAX_LIMIT),))
            return [dead_letter_group(row) for row in _all(cursor)]

    # ---- workflows ----------------------------------------------------------------

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
        where = _Where()
        where.add("status = ?", status)
        where.add("name = ?", name)
        where.add("started_at_ms >= ?", None if since is None else to_ms(since))
        where.add("started_at_ms < ?", None if until is None else to_ms(until))
        return self._page(
            select=_WORKFLOW_SELECT,
            table=WORKFLOWS,
            where=where,
            order=_WORKFLOW_ORDER,
            convert=workflow_row,
            paging=(limit, offset, cursor),
        )

    # ---- statistics ---------------------------------------------------------------

    def minute_stats(self, *, since: datetime, until: datetime) -> list[MinuteStats]:
        minutes = stats_minutes(since, until)
        if not minutes:
            return []
        start, end = minutes.start, minutes.stop
        with self._database.transaction(snapshot=True) as cursor:
            counters = _counters(cursor, start, end)
            histograms = _histograms(cursor, start, end)
        return [
            minute_row(minute, counters.get(minute), histograms.get(minute, {}))
            for minute in minutes
        ]

    def status_counts(self) -> dict[str, dict[str, int]]:
        counts = no_counts()
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(f"SELECT kind, status, count FROM {STATUS_COUNTS}")  # noqa: S608 (constant names)
            for kind, status, count in _all(cursor):
                counts.setdefault(kind, {})[status] = int(count)
        return counts


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
