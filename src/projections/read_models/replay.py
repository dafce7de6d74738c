"""The fold of a whole log into new tables (``<table>_rebuild``), shared by a rebuild in
one process and by each share of a rebuild in several (``read_model_rebuild``).

Rows stay in memory while later events may still change them, and each leaves memory
once, written with one bulk insert (``COPY`` on PostgreSQL) when its execution reaches
a final status, or at the end; attempts leave with their lease. Nothing is read back
and nothing is upserted. An event of an execution that already left memory (no command
may follow a final status, so only an odd log has one) is kept aside and folded at the
end into that execution's row, read back from the new table.
"""

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import structlog

from jobledger.persistence.log_store import LogRow, RowPage
from jobledger.projections.collector import collector_paused
from jobledger.projections.database import Database, Row, row_values
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import Isolation
from jobledger.projections.queue.prefetch import prefetched
from jobledger.projections.read_models.tables import (
    ATTEMPT_COLUMNS,
    ATTEMPTS,
    CREATIONS,
    EXECUTION_COLUMNS,
    EXECUTION_EVENTS,
    EXECUTIONS,
    FINAL_STATUSES,
    HISTOGRAMS,
    JOB_COLUMNS,
    JOBS,
    MINUTE_STATS,
    STAT_COLUMNS,
    STATUS_COUNTS,
    TABLES,
    Fold,
    ReadModelTables,
)
from jobledger.projections.read_models.workflows import WORKFLOW_COLUMNS, WORKFLOWS

log = structlog.get_logger(__name__)

SUFFIX = "_rebuild"
FLUSH_ROWS = 20_000  # rows per bulk insert

_CREATIONS = frozenset(CREATIONS)
_NUL = b"\\u0000"
_COLUMNS = {
    JOBS: JOB_COLUMNS,
    EXECUTIONS: EXECUTION_COLUMNS,
    ATTEMPTS: ATTEMPT_COLUMNS,
    MINUTE_STATS: ("minute_ms", *STAT_COLUMNS),
    HISTOGRAMS: ("minute_ms", "metric", "bucket", "count"),
    STATUS_COUNTS: ("kind", "status", "count"),
    WORKFLOWS: WORKFLOW_COLUMNS,
}


def shadow(table: str) -> str:
    return table + SUFFIX


def pages_of(reader: LogReader, stop: int | None = None) -> Iterator[tuple[int, RowPage]]:
    """(start, page) from the beginning of the log to its head (or ``stop``)."""
    position = 0
    while True:
        page = reader.rows(position, stop)
        if page.position == position:
            return
        yield position, page
        position = page.position


class Output:
    """Rows bound for the new tables, inserted a batch at a time.

    A row's values are taken as they are until the log is seen to hold the character
    NUL (which a table's text cannot), and then made storable one by one."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._rows: dict[str, list[tuple[Any, ...]]] = {table: [] for table in TABLES}
        self._getters = {table: operator.itemgetter(*_COLUMNS[table]) for table in TABLES}
        self.careful = False

    def add(self, table: str, row: Row) -> None:
        rows = self._rows[table]
        if self.careful:
            rows.extend(row_values([row], _COLUMNS[table]))
        else:
            rows.append(self._getters[table](row))
        if len(rows) >= FLUSH_ROWS:
            self.flush(table)

    def add_values(self, table: str, values: Sequence[tuple[Any, ...]]) -> None:
        self._rows[table].extend(values)
        self.flush(table)

    def flush(self, table: str | None = None) -> None:
        for name in (table,) if table else TABLES:
            rows, self._rows[name] = self._rows[name], []
            if rows:
                with self._database.transaction() as cursor:
                    # The new tables are rebuilt from the log if a crash loses a batch.
                    cursor.asynchronous_commit()
                    cursor.insert_rows(shadow(name), _COLUMNS[name], rows)


class JobStubs(dict[str, Row]):
    """A share's stand-in for the jobs' rows (their events are folded elsewhere): a
    row per job its executions name, holding only what executions set in it."""

    def get(self, key: str, default: Row | None = None) -> Row | None:  # type: ignore[override] # noqa: ARG002 (a row is always made)
        row = dict.get(self, key)
        if row is None:
            row = self[key] = {
                "id": key,
                "last_execution_id": None,
                "last_status": None,
                "last_finished_at_ms": None,
            }
        return row


class Replay:
    """The fold of the whole log, letting rows go as soon as no event can change them:
    an execution in a final status, an attempt whose lease is over.

    With ``jobs`` (a share's stubs), it also notes where each job's latest execution
    was created, so that the shares' answers can be merged (``read_model_parts``)."""

    def __init__(self, output: Output, jobs: JobStubs | None = None) -> None:
        self.fold = Fold({} if jobs is None else jobs, {})
        self.late: list[tuple[str, Any]] = []
        self.latest: dict[str, int] | None = None if jobs is None else {}
        self._output = output
        self._current: dict[str, int] = {}  # an execution's attempt held in memory

    def apply(self, events: Sequence[tuple[int, str, Any]]) -> None:
        fold, latest = self.fold, self.latest
        executions, execution_event = fold.executions, fold.execution_event
        for position, key, event in events:
            kind = type(event)
            if kind not in EXECUTION_EVENTS:
                fold.apply(key, event)
            elif key in executions:
                execution_event(key, event)
            elif kind in _CREATIONS:
                execution_event(key, event)
                job_id = executions[key]["job_id"]
                if latest is not None and job_id is not None:
                    latest[job_id] = position
            else:
                self.late.append((key, event))
        self.let_go()

    def let_go(self) -> None:
        fold, output = self.fold, self._output
        for key in fold.changed_executions:
            row = fold.executions[key]
            held = self._current.get(key)
            final = row["status"] in FINAL_STATUSES
            if held is not None and (final or held != row["lease_seq"]):
                self._attempt_out((key, held))
            if final:
                output.add(EXECUTIONS, fold.executions.pop(key))
        for lease in fold.changed_attempts:
            execution = fold.executions.get(lease[0])
            if execution is None or execution["lease_seq"] != lease[1]:
                self._attempt_out(lease)
            elif lease in fold.attempts:
                self._current[lease[0]] = lease[1]
        fold.changed_executions.clear()
        fold.changed_attempts.clear()
        fold.changed_jobs.clear()
        fold.workflows.changed.clear()

    def _attempt_out(self, key: tuple[str, int]) -> None:
        attempt = self.fold.attempts.pop(key, None)
        if self._current.get(key[0]) == key[1]:
            del self._current[key[0]]
        if attempt is not None:
            self._output.add(ATTEMPTS, attempt)

    def hold(self, executions: Sequence[Row], attempts: Sequence[Row]) -> None:
        """Take back rows that already left memory (for the late events)."""
        for row in executions:
            self.fold.executions[row["id"]] = row
        for attempt in attempts:
            self.fold.attempts[attempt["execution_id"], attempt["seq"]] = attempt
            self._current[attempt["execution_id"]] = attempt["seq"]

    def flush_executions(self) -> None:
        """Every execution and attempt still held goes out."""
        fold, output = self.fold, self._output
        for row in fold.executions.values():
            output.add(EXECUTIONS, row)
        for attempt in fold.attempts.values():
            output.add(ATTEMPTS, attempt)
        fold.executions.clear()
        fold.attempts.clear()
        output.flush()

    def finish(self) -> None:
        """Every row still held goes out, with the jobs, the workflows and the counts."""
        self.flush_executions()
        fold, output = self.fold, self._output
        output.add_values(JOBS, row_values(fold.jobs.values(), JOB_COLUMNS))
        workflows = fold.workflows.rows.values()
        output.add_values(WORKFLOWS, row_values(workflows, WORKFLOW_COLUMNS))
        output.add_values(MINUTE_STATS, [(m, *c) for m, c in fold.stats.items()])
        output.add_values(HISTOGRAMS, [(*k, n) for k, n in fold.histograms.items()])
        counts = [(*k, n) for k, n in fold.status_counts.items() if n]
        output.add_values(STATUS_COUNTS, counts)
        output.flush()


class Folder:
    """Folds pages of the log into a replay: decoding, isolating what cannot be
    decoded as the follower does, and at the end the late events."""

    def __init__(
        self,
        database: Database,
        tables: ReadModelTables,
        reader: LogReader,
        isolation: Isolation,
    ) -> None:
        self._database = database
        self._tables = tables
        self._reader = reader.with_text_ids()
        self._isolation = isolation
        self.output = Output(database)

    def replay(self, replay: Replay, stop: int, report: Callable[[int], None]) -> int:
        """Fold the log up to ``stop`` into ``replay``, saying each position reached;
        returns the events read."""
        applied = 0
        pages = prefetched(pages_of(self._reader, stop), name="read-models-rebuild")
        with contextlib.closing(pages), collector_paused():
            for _start, page in pages:
                replay.apply(self._decode(page.rows))
                applied += len(page.rows)
                report(page.position)
        return applied

    def _decode(self, rows: Sequence[LogRow]) -> list[tuple[int, str, Any]]:
        """The page's events; one that cannot be decoded is isolated (and the rest of
        its stream held), as the follower isolates it."""
        events = self._isolation.decoded(rows, self._reader.decode)
        # JSON carries NUL as an escape: a state without one holds no NUL anywhere. One
        # search of the page's states joined costs less than a search per state.
        if not self.output.careful and _NUL in b"".join([row[4] for row in rows]):
            self.output.careful = True
        return events

    def fold_late(self, replay: Replay) -> None:
        """Fold the events of executions that had left memory into their rows."""
        if not replay.late:
            return
        log.warning("read_models.rebuild_late_events", events=len(replay.late))
        self.output.flush()
        ids = sorted({key for key, _event in replay.late})
        with self._database.transaction() as cursor:
            executions, attempts = self._tables.take_back_rebuilt(cursor, ids)
        replay.hold(executions, attempts)
        late, replay.late = replay.late, []
        for key, event in late:
            replay.fold.apply(key, event)
        replay.let_go()
