"""The read models' rebuild: the whole log folded into new tables, then swapped in.

A replay through the follower's pages reads back every row it wrote a page before and
upserts it again, into tables whose indexes grow with every row: at a few million
events it managed a few thousand events a second. Here the log is folded into new
tables beside the live ones instead (``<table>_rebuild``):

- rows stay in memory while later events may still change them, and each leaves
  memory once, written with one bulk insert (``COPY`` on PostgreSQL) when its execution
  reaches a final status, or at the end; attempts leave with their lease. Nothing is
  read back and nothing is upserted (``read_model_replay``);
- on PostgreSQL, a log long enough is folded in several processes: each folds the
  executions of a share of the streams while this one folds the jobs and the
  workflows, and the shares' answers are merged (``read_model_parts``);
- on PostgreSQL the new tables get their indexes once they hold every row (a sort
  each, not an insert per row), built on a connection per process of the fold at
  once, and their statistics (``ANALYZE``);
- one transaction swaps them in, under the follower's position lock, and sets the
  position to where the fold ended; the follower (here or in another process) then
  goes on from there. Until then the live tables serve every read, current as the
  follower keeps them.

The fold is the follower's own (``read_model_tables.Fold``), so the tables equal what
following the log builds. The fold stops at the head the rebuild began with; what came
after is folded by the follower's pages once the tables are swapped in.

While a rebuild runs, its mark (a position row at 0) holds the archive back, as a
reset follower does: nothing leaves the log that the new tables might still hold. A
rebuild that dies leaves the live tables as they were; the next one drops what it left.
"""

from collections.abc import Callable

import structlog

from jobledger.projections.database import Database
from jobledger.projections.log.positions import Position, Positions
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import Isolation
from jobledger.projections.read_models.job_index import JOB_TOPICS
from jobledger.projections.read_models.parts import Part, PartRunner, merge
from jobledger.projections.read_models.replay import Folder, Replay, shadow
from jobledger.projections.read_models.tables import TABLES, ReadModelTables
from jobledger.projections.read_models.workflows import WORKFLOW_TOPICS

log = structlog.get_logger(__name__)

# A position row that holds the archive's low-water mark at 0 while a rebuild runs.
MARK = "read-models-rebuild"
Progress = Callable[[int, int], None]  # (done, total)


class ShadowRebuild:
    """Folds the log into new tables and swaps them in (see the module's notes); with
    ``parts``, the executions' events are folded by processes of their own, a share of
    the streams each, and the jobs' and workflows' events here (``read_model_parts``)."""

    def __init__(
        self,
        database: Database,
        position: Position,
        positions: Positions,
        reader: LogReader,
        isolation: Isolation,
        *,
        tables: ReadModelTables,
        parts: PartRunner | None = None,
    ) -> None:
        self._database = database
        self._tables = tables
        self._positions = positions
        self._position = position
        self._mark = positions.of(MARK)
        self._reader = reader
        self._isolation = isolation
        self._parts = parts
        self._folder = Folder(database, tables, reader, isolation)

    def run(self, report: Progress) -> int:
        """Build the tables anew and swap them in; returns the events read. Nothing of
        the live tables changes unless the swap commits."""
        self._begin()
        try:
            head = self._reader.head()
            connections = 1
            if self._parts is not None and self._parts.worth_it(head):
                replay, applied = self._replay_in_parts(self._parts, head, report)
                connections = self._parts.processes
            else:
                replay = Replay(self._folder.output)
                applied = self._folder.replay(replay, head, lambda reached: report(reached, head))
                self._folder.fold_late(replay)
            replay.finish()
            self._index(connections)
            self._swap(head)
        except BaseException:
            self._abandon()
            raise
        return applied

    def _replay_in_parts(
        self, parts: PartRunner, head: int, report: Progress
    ) -> tuple[Replay, int]:
        """The jobs and the workflows folded here while the shares fold the executions;
        merged."""
        count = parts.processes
        shares = [Part(index, count, head, self._isolation.persist) for index in range(count)]
        reached = [0] * count

        def reached_by(index: int, position: int) -> None:
            # The shares read the whole log, a share of it each: the slowest says how far.
            reached[index] = position
            report(min(reached), head)

        log.info("read_models.rebuild_in_parts", parts=count, head=head)
        with parts.start(shares) as running:
            reader = self._reader.of_topics(sorted({*JOB_TOPICS, *WORKFLOW_TOPICS}))
            jobs = Folder(self._database, self._tables, reader, self._isolation)
            replay = Replay(jobs.output)
            applied = jobs.replay(replay, head, lambda _position: None)
            results = running.wait(reached_by)
        chosen: dict[str, int] = {}
        for result in results:
            applied += merge(replay.fold, result, self._isolation, chosen)
        return replay, applied

    def _index(self, connections: int) -> None:
        """Every new table's indexes, built on ``connections`` at once (as many as the
        fold had processes; largest table first), then their keys and statistics."""
        with self._database.transaction() as cursor:
            plans = [cursor.shadow_indexes(table, shadow(table)) for table in TABLES]
        plans.sort(key=lambda plan: plan.size, reverse=True)
        builds = [statement for plan in plans for statement in plan.builds]
        log.info("read_models.rebuild_indexing", indexes=len(builds), connections=connections)
        self._database.build_indexes(builds, connections=connections)
        with self._database.transaction() as cursor:
            for plan in plans:
                for statement in plan.keys:
                    cursor.execute(statement.decode())

    def _begin(self) -> None:
        with self._database.transaction() as cursor:
            # Waits for an archive's removal under way: the replay then reads the log
            # without what it removed, and the next removal sees the mark.
            self._positions.lock_all(cursor)
            self._mark.write(cursor, 0)
            self._tables.create_rebuilt(cursor)

    def _swap(self, reached: int) -> None:
        with self._database.transaction() as cursor:
            self._position.lock(cursor)
            for table in TABLES:
                cursor.swap_shadow(table, shadow(table))
            self._position.write(cursor, reached)
            self._mark.remove(cursor)

    def _abandon(self) -> None:
        """Drop what a failed rebuild made (best effort: the next one drops it too)."""
        try:
            with self._database.transaction() as cursor:
                self._tables.drop_rebuilt(cursor)
                self._mark.remove(cursor)
        except Exception as error:  # noqa: BLE001 (the rebuild's own error is the one to raise)
            log.warning("read_models.rebuild_not_cleaned_up", error=str(error))
