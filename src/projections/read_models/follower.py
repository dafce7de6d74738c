"""The read models' follower: the log, page by page, into the read-model tables.

Exactly once in effect, like the job index and the checkpoint: a page is applied in one
transaction with the position. That transaction first locks the position row and checks
that the position is still where the page starts, so two processes never both apply a
page: the second one finds the position moved and leaves the page alone. The rows'
version guards (``read_model_tables``) make a page applied again change nothing.

A page is folded in memory: the rows it touches are read once, every event is applied
to them in log order, and each changed row is written once: one statement per table and
page on PostgreSQL, one per row on SQLite (``Cursor.write_rows``).
"""

import contextlib
from collections.abc import Callable, Sequence

import structlog

from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow, RowPage
from jobledger.projections.bell import Bell
from jobledger.projections.collector import collector_paused
from jobledger.projections.database import Database
from jobledger.projections.log.positions import Positions
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import (
    READ_MODELS_FOLLOWER,
    Isolation,
    describe,
    is_outage,
)
from jobledger.projections.queue.fold import EXECUTION_TOPICS
from jobledger.projections.queue.prefetch import prefetched
from jobledger.projections.read_models.job_index import JOB_TOPICS
from jobledger.projections.read_models.parts import PartRunner
from jobledger.projections.read_models.rebuild import ShadowRebuild
from jobledger.projections.read_models.replay import pages_of
from jobledger.projections.read_models.tables import FOLD_VIEWS, ReadModelTables
from jobledger.projections.read_models.workflows import WORKFLOW_TOPICS

log = structlog.get_logger(__name__)

POSITION = "read-models"
TOPICS = tuple(sorted({*JOB_TOPICS, *EXECUTION_TOPICS, *WORKFLOW_TOPICS}))
# What the follower rings after a page (``moved``): the runs' rows may have changed.
MOVED = ("runs",)
REPLAY_PAGE = 10_000  # events per page of a rebuild: fewer, larger transactions
# After a page this large or larger, events gather a whole window (ReadModels.gather).
GATHER_EVENTS = 50
Progress = Callable[[int, int], None]  # (done, total)


def _no_progress(_done: int, _total: int) -> None:
    return None


class ReadModels:
    """Follows the log into the read-model tables; ``step`` is one unit of work."""

    def __init__(
        self,
        ledger: Ledger,
        database: Database,
        *,
        positions: Positions,
        tables: ReadModelTables,
        page_size: int = 2000,
        isolation: Isolation | None = None,
        parts: PartRunner | None = None,
        moved: Bell | None = None,
    ) -> None:
        self._database = database
        # Rung after each live page applied: long-polls waiting for runs look again.
        self._moved = moved
        self._parts = parts
        self._positions = positions
        self._tables = tables
        self._position = positions.of(POSITION)
        self._last_page = 0  # the events of the last page applied
        self._committed: int | None = None
        self._reader = LogReader(ledger, page_size, topics=TOPICS, views=FOLD_VIEWS)
        self._replay_reader = LogReader(
            ledger, max(page_size, REPLAY_PAGE), topics=TOPICS, views=FOLD_VIEWS
        )
        self.isolation = isolation or Isolation(READ_MODELS_FOLLOWER)

    @property
    def reader(self) -> LogReader:
        """The reader of the live pages ``step`` applies."""
        return self._reader

    def step(self) -> bool:
        """Apply the next page; True if more may be waiting already: the page was full,
        or another process got to it first. After a page short of full the log had no
        more, and the follower lets events gather before the next page (``gather``)."""
        count = self._next_page(self._reader, self.isolation)
        self._last_page = count or 0
        if count:
            self._ring()
        return count is not None and (count == 0 or count >= self._reader.page_size)

    def gather(self, most: float) -> float:
        """How long to let events gather after a wake-up: in proportion to the last
        page's events, up to ``most`` from ``GATHER_EVENTS`` on. A run's few events at
        low load are shown at once (a client's wait hears of its end); under load each
        page gathers about ``most`` worth, as a page costs about what one of a single
        event does. After a step that found nothing, nothing is gathered."""
        return most * min(1.0, self._last_page / GATHER_EVENTS)

    def _ring(self) -> None:
        """Say that the tables moved. A failed ring loses nothing: the waits poll."""
        if self._moved is None:
            return
        try:
            self._moved.ring(MOVED)
        except Exception as error:  # noqa: BLE001 (any failure: a ring is only a shortcut)
            log.warning("read_models.ring_failed", error=str(error))

    def position(self) -> int:
        return self._position.get()

    def lag(self) -> int:
        """Events in the log that the read models have not seen yet."""
        return max(0, self._reader.head() - self.position())

    def rebuild(
        self, progress: Progress | None = None, *, isolation: Isolation | None = None
    ) -> int:
        """Fold the whole log into the tables anew; returns the events read.

        The log goes into new tables beside the live ones, which are swapped in at the
        end (``read_model_rebuild``); the live tables keep serving reads meanwhile, and
        the follower keeps them current. If that cannot be done (no right to create
        tables, a row a table refuses), the tables are emptied and the log replayed
        into them page by page instead. Either way, what cannot be applied is
        quarantined through ``isolation`` (the follower's own unless given), and the
        rebuild then follows the log to its head page by page.
        """
        report = progress or _no_progress
        isolation = isolation or self.isolation
        head = self._replay_reader.head()
        try:
            applied = ShadowRebuild(
                self._database,
                self._position,
                self._positions,
                self._replay_reader,
                isolation,
                tables=self._tables,
                parts=self._parts,
            ).run(report)
        except Exception as error:
            if is_outage(error):
                raise
            log.warning("read_models.rebuild_in_place", error=describe(error))
            applied = self._replay_in_place(report, isolation)
        while (count := self._next_page(self._replay_reader, isolation)) is not None:
            applied += count
        position = self.position()
        report(position, max(head, position))
        log.info("read_models.rebuilt", events=applied, position=position)
        return applied

    def _replay_in_place(self, report: Progress, isolation: Isolation) -> int:
        """Empty the tables and replay the log into them, a page per transaction. If
        another process applies pages meanwhile, this notices at the position and
        leaves the rest to the caller's page-by-page loop."""
        self._reset()
        head = self._replay_reader.head()
        applied = 0
        pages = prefetched(pages_of(self._replay_reader), name="read-models-read")
        with contextlib.closing(pages), collector_paused():
            for start, page in pages:
                if not isolation.apply(page, start, self._commit_rows):
                    break
                applied += len(page.rows)
                report(page.position, max(head, page.position))
        return applied

    def _reset(self) -> None:
        with self._database.transaction() as cursor:
            self._position.lock(cursor)
            self._tables.clear(cursor)
            self._position.write(cursor, 0)

    def _next_page(self, reader: LogReader, isolation: Isolation) -> int | None:
        """Events read from the next page; None when there was no page."""
        # The position this process last committed; the commit's claim finds out if
        # another process moved it since, and the next page then reads it again.
        start = self.position() if self._committed is None else self._committed
        page = reader.rows(start)
        if page.position == start:
            return None
        return len(page.rows) if isolation.apply(page, start, self._commit_rows) else 0

    def _commit_rows(self, rows: Sequence[LogRow], start: int, position: int) -> bool:
        return self._commit(RowPage(rows, position), start)

    def apply_one(self, row: LogRow) -> None:
        """Fold one event into the tables without moving the position (a retry of a
        quarantined event). The position row's lock keeps it apart from a page."""
        event = self._reader.event(row)
        key = str(event.originator_id)
        with self._database.transaction() as cursor:
            self._position.lock(cursor)
            fold = self._tables.read_fold(cursor, [(key, event)])
            fold.apply(key, event)
            self._tables.write_fold(cursor, fold)

    def _commit(self, page: RowPage, start: int) -> bool:
        """Apply ``page`` (which starts at ``start``) and move the position past it,
        in one transaction; False if the position had moved meanwhile."""
        events = [(str(e.originator_id), e) for e in self._reader.events(page.rows)]
        with self._database.transaction(pipelined=True) as cursor:
            # The page and the position commit together, and the log has both again.
            cursor.asynchronous_commit()
            self._committed = None
            if not self._position.claim(cursor, start):
                return False
            fold = self._tables.read_fold(cursor, events)
            for key, event in events:
                fold.apply(key, event)
            self._tables.write_fold(cursor, fold)
            self._position.write(cursor, page.position)
        self._committed = page.position
        return True
