"""The read-model tables (migrations 0004 and 0020) on the event store's database: the rows a
page's fold reads and writes, their removal by the archive and the cleanup, and a
rebuild's new tables."""

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from jobledger.projections.database import (
    Cursor,
    Database,
    Row,
    RowsStatement,
    chunked,
    upsert,
)
from jobledger.projections.read_models.replay import shadow
from jobledger.projections.read_models.tables import (
    ATTEMPT_COLUMNS,
    ATTEMPTS,
    EXECUTION_COLUMNS,
    EXECUTION_KIND,
    EXECUTIONS,
    FINAL_STATUSES,
    HISTOGRAMS,
    ID_CHUNK,
    JOB_COLUMNS,
    JOBS,
    MINUTE_STATS,
    STAT_COLUMNS,
    STATUS_COUNTS,
    TABLES,
    Fold,
    touched,
)
from jobledger.projections.read_models.workflows import (
    WORKFLOW_COLUMNS,
    WORKFLOWS,
    touched_workflows,
)
from jobledger.projections.times import to_ms


def _replace(
    table: str, columns: Sequence[str], key: Sequence[str], guard: str = ""
) -> RowsStatement:
    """An upsert that overwrites the stored row (if ``guard`` holds)."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    conflict = f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    return upsert(table, columns, f"{conflict} WHERE {guard}" if guard else conflict)


def _add(table: str, columns: Sequence[str], key: Sequence[str]) -> RowsStatement:
    """An upsert that adds its values to the stored row's."""
    sums = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in columns if c not in key)
    return upsert(table, columns, f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sums}")


_UPSERT_JOB = _replace(JOBS, JOB_COLUMNS, ("id",), f"excluded.version >= {JOBS}.version")
_UPSERT_EXECUTION = _replace(
    EXECUTIONS, EXECUTION_COLUMNS, ("id",), f"excluded.version > {EXECUTIONS}.version"
)
_UPSERT_ATTEMPT = _replace(ATTEMPTS, ATTEMPT_COLUMNS, ("execution_id", "seq"))
_UPSERT_WORKFLOW = _replace(
    WORKFLOWS, WORKFLOW_COLUMNS, ("id",), f"excluded.version > {WORKFLOWS}.version"
)
_ADD_STATS = _add(MINUTE_STATS, ("minute_ms", *STAT_COLUMNS), ("minute_ms",))
_ADD_HISTOGRAM = _add(
    HISTOGRAMS, ("minute_ms", "metric", "bucket", "count"), ("minute_ms", "metric", "bucket")
)
_ADD_STATUS_COUNTS = _add(STATUS_COUNTS, ("kind", "status", "count"), ("kind", "status"))
_DROP_ZERO_COUNTS = f"DELETE FROM {STATUS_COUNTS} WHERE count = 0"  # noqa: S608 (constant)
_SELECT_JOBS = f"SELECT {', '.join(JOB_COLUMNS)} FROM {JOBS} WHERE id IN "  # noqa: S608 (constant)
_SELECT_EXECUTIONS = f"SELECT {', '.join(EXECUTION_COLUMNS)} FROM {EXECUTIONS} WHERE id IN "  # noqa: S608 (constant)
_SELECT_WORKFLOWS = f"SELECT {', '.join(WORKFLOW_COLUMNS)} FROM {WORKFLOWS} WHERE id IN "  # noqa: S608 (constant)
# The attempt each execution's latest lease made (a report may settle it).
_SELECT_ATTEMPTS = (
    f"SELECT {', '.join('a.' + c for c in ATTEMPT_COLUMNS)} FROM {ATTEMPTS} a "  # noqa: S608 (constant)
    f"JOIN {EXECUTIONS} e ON e.id = a.execution_id AND e.lease_seq = a.seq WHERE e.id IN "
)
_FINAL = ", ".join(f"'{status}'" for status in FINAL_STATUSES)
# A run finishes after it was enqueued: bounded by its enqueue time too, the rows to
# prune are found through the enqueue-time index, and no index on the finish time costs
# every write of a row (ADR 70). Both bounds take the cutoff.
_PRUNABLE = f"enqueued_at_ms < ? AND finished_at_ms < ? AND status IN ({_FINAL})"
_PRUNE_ATTEMPTS = (
    f"DELETE FROM {ATTEMPTS} WHERE execution_id IN (SELECT id FROM {EXECUTIONS} "  # noqa: S608 (constant)
    f"WHERE {_PRUNABLE})"
)
_COUNT_PRUNABLE = f"SELECT status, count(*) FROM {EXECUTIONS} WHERE {_PRUNABLE} GROUP BY status"  # noqa: S608 (constant)
_PRUNE_EXECUTIONS = f"DELETE FROM {EXECUTIONS} WHERE {_PRUNABLE}"  # noqa: S608 (constant)
# A rebuild's new tables: their rows of executions that late events change.
_SELECT_REBUILT_EXECUTIONS = (
    f"SELECT {', '.join(EXECUTION_COLUMNS)} FROM {shadow(EXECUTIONS)} WHERE id IN "  # noqa: S608 (constant)
)
_SELECT_REBUILT_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM {shadow(ATTEMPTS)} "  # noqa: S608 (constant)
    "WHERE execution_id IN "
)
_DELETE_REBUILT_EXECUTION = f"DELETE FROM {shadow(EXECUTIONS)} WHERE id = ?"  # noqa: S608 (constant)
_DELETE_REBUILT_ATTEMPT = f"DELETE FROM {shadow(ATTEMPTS)} WHERE execution_id = ? AND seq = ?"  # noqa: S608 (constant)


class SqlReadModelTables:
    """The read-model tables (``ReadModelTables``) on the event store's database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def read_fold(self, cursor: Cursor, events: Sequence[tuple[str, Any]]) -> Fold:
        job_ids, execution_ids = touched(events)
        executions = {
            row["id"]: row
            for row in select_rows(cursor, _SELECT_EXECUTIONS, EXECUTION_COLUMNS, execution_ids)
        }
        job_ids.update(row["job_id"] for row in executions.values() if row["job_id"] is not None)
        jobs = {row["id"]: row for row in select_rows(cursor, _SELECT_JOBS, JOB_COLUMNS, job_ids)}
        flows = select_rows(cursor, _SELECT_WORKFLOWS, WORKFLOW_COLUMNS, touched_workflows(events))
        fold = Fold(jobs, executions, {row["id"]: row for row in flows})
        leased = (key for key, row in executions.items() if row["lease_seq"] is not None)
        for row in select_rows(cursor, _SELECT_ATTEMPTS, ATTEMPT_COLUMNS, leased):
            fold.attempts[row["execution_id"], row["seq"]] = row
        return fold

    def write_fold(self, cursor: Cursor, fold: Fold) -> None:
        # Sorted, so that concurrent writers of the same rows take their locks in one order.
        cursor.write_records(_UPSERT_JOB, [fold.jobs[key] for key in sorted(fold.changed_jobs)])
        executions = [fold.executions[key] for key in sorted(fold.changed_executions)]
        cursor.write_records(_UPSERT_EXECUTION, executions)
        attempts = [fold.attempts[key] for key in sorted(fold.changed_attempts)]
        cursor.write_records(_UPSERT_ATTEMPT, attempts)
        workflows = fold.workflows
        changed = [workflows.rows[key] for key in sorted(workflows.changed)]
        cursor.write_records(_UPSERT_WORKFLOW, changed)
        cursor.write_rows(_ADD_STATS, [(m, *c) for m, c in sorted(fold.stats.items())])
        cursor.write_rows(_ADD_HISTOGRAM, [(*k, n) for k, n in sorted(fold.histograms.items())])
        _add_status_counts(cursor, [(*k, n) for k, n in sorted(fold.status_counts.items()) if n])

    def clear(self, cursor: Cursor) -> None:
        for table in TABLES:
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 (constant names)

    def forget_executions(self, cursor: Cursor, execution_ids: Sequence[str]) -> int:
        gone: Counter[str] = Counter()
        for chunk in chunked(execution_ids, ID_CHUNK):
            cursor.execute_in(f"SELECT status FROM {EXECUTIONS} WHERE id IN", chunk)  # noqa: S608 (constant names)
            gone.update(str(row[0]) for row in cursor.fetchmany(len(chunk)))
            cursor.execute_in(f"DELETE FROM {ATTEMPTS} WHERE execution_id IN", chunk)  # noqa: S608 (constant names)
            cursor.execute_in(f"DELETE FROM {EXECUTIONS} WHERE id IN", chunk)  # noqa: S608 (constant names)
        _add_status_counts(cursor, [(EXECUTION_KIND, s, -n) for s, n in sorted(gone.items())])
        return sum(gone.values())

    def prune_finished(self, *, before: datetime) -> int:
        cutoff = to_ms(before)
        with self._database.transaction() as cursor:
            cursor.execute(_COUNT_PRUNABLE, (cutoff, cutoff))
            gone = [(EXECUTION_KIND, status, -int(count)) for status, count in cursor.fetchmany(10)]
            cursor.execute(_PRUNE_ATTEMPTS, (cutoff, cutoff))
            cursor.execute(_PRUNE_EXECUTIONS, (cutoff, cutoff))
            _add_status_counts(cursor, gone)
        return -sum(count for _kind, _status, count in gone)

    def create_rebuilt(self, cursor: Cursor) -> None:
        for table in TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS {shadow(table)}")
            cursor.create_shadow(table, shadow(table))

    def drop_rebuilt(self, cursor: Cursor) -> None:
        for table in TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS {shadow(table)}")

    def take_back_rebuilt(
        self, cursor: Cursor, execution_ids: Sequence[str]
    ) -> tuple[list[Row], list[Row]]:
        select = _SELECT_REBUILT_EXECUTIONS
        executions = list(select_rows(cursor, select, EXECUTION_COLUMNS, execution_ids))
        attempts = _current_attempts(cursor, executions)
        for row in executions:
            cursor.execute(_DELETE_REBUILT_EXECUTION, (row["id"],))
        for row in attempts:
            cursor.execute(_DELETE_REBUILT_ATTEMPT, (row["execution_id"], row["seq"]))
        return executions, attempts


def select_rows(
    cursor: Cursor, select: str, columns: Sequence[str], ids: Iterable[str]
) -> Iterator[Row]:
    """The rows ``select`` (which ends in ``IN``) finds for ``ids``, as dicts of
    ``columns``; a statement per ``ID_CHUNK`` ids."""
    wanted = sorted(ids)
    for chunk in chunked(wanted, ID_CHUNK):
        cursor.execute_in(select, chunk)
        while rows := cursor.fetchmany(ID_CHUNK):
            yield from (dict(zip(columns, row, strict=True)) for row in rows)


def _current_attempts(cursor: Cursor, executions: Sequence[Row]) -> list[Row]:
    """The rebuilt attempt each of ``executions``' latest lease made."""
    leases = {(row["id"], row["lease_seq"]) for row in executions if row["lease_seq"] is not None}
    if not leases:
        return []
    ids = sorted({i for i, _ in leases})
    found = select_rows(cursor, _SELECT_REBUILT_ATTEMPTS, ATTEMPT_COLUMNS, ids)
    return [row for row in found if (row["execution_id"], row["seq"]) in leases]


def _add_status_counts(cursor: Cursor, changes: Sequence[tuple[str, str, int]]) -> None:
    if changes:
        cursor.write_rows(_ADD_STATUS_COUNTS, changes)
        # Only statuses that something is in: a rebuild, which nets a page's changes
        # before writing them, would never write the zeros.
        cursor.execute(_DROP_ZERO_COUNTS)
