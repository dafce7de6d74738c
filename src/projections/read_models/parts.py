"""A rebuild's executions folded in shares, a process each, and the shares merged.

The read models' fold is per stream, but for three things: a job's row names its latest
execution (and that execution's status), and the statistics and the status counts add
up over all executions. So the executions' events can be folded apart, a share of the
streams each (``log.PART_OF``: the last byte of the stream's id), while one process
folds the jobs' events (and the workflows', whose rows name no execution). Each share
writes its executions and attempts to the new tables itself and answers with what the
merge needs: for each job the position of its latest execution's creation in that
share, with that execution's id and status; and its statistics and counts. The merge
takes, for each job, the share whose latest creation came last in the log, and adds up
the rest: the tables equal the fold of the whole log in one process.
"""

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow
from jobledger.projections.database import Database
from jobledger.projections.log.reader import EXECUTION_EVENTS as EXECUTION_TOPICS
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import Held, Isolation
from jobledger.projections.read_models.replay import Folder, JobStubs, Replay
from jobledger.projections.read_models.tables import (
    EXECUTION_KIND,
    FOLD_VIEWS,
    Fold,
    ReadModelTables,
)

# A job's latest execution in one share: (its creation's position, its id, its status,
# when it finished).
Latest = tuple[int, str | None, str | None, int | None]
_FINISHED = "last_finished_at_ms"


@dataclass(frozen=True)
class Part:
    """One share of a rebuild: the streams with ``part_of(id, count) == index``, up to
    the log position ``stop``; ``persist``: record what it isolates (as the rebuild's
    own isolation does)."""

    index: int
    count: int
    stop: int
    persist: bool = True


@dataclass
class PartResult:
    """What a share folded, for the merge (sent between processes: plain values)."""

    events: int
    latest: dict[str, Latest]
    stats: dict[int, list[int]]
    histograms: dict[tuple[int, str, int], int]
    status_counts: dict[tuple[str, str], int]
    isolated: list[tuple[LogRow, str]] = field(default_factory=list)
    isolated_count: int = 0
    unrecorded: Held = field(default_factory=dict)


class RunningParts(Protocol):
    def wait(self, reached: Callable[[int, int], None]) -> list[PartResult]:
        """Every share's result, in index order; ``reached(index, position)`` as they
        go. Raises what a share raised (an outage as an outage)."""
        ...


class PartRunner(Protocol):
    """Runs the shares of a rebuild, each in a process of its own."""

    processes: int

    def worth_it(self, events: int) -> bool:
        """True if a log of ``events`` is long enough to spread (starting processes
        costs about a second)."""
        ...

    def start(self, parts: Sequence[Part]) -> contextlib.AbstractContextManager[RunningParts]:
        """The shares, started; leaving the block stops those still running."""
        ...


def fold_part(
    ledger: Ledger,
    database: Database,
    tables: ReadModelTables,
    isolation: Isolation,
    part: Part,
    *,
    page_size: int,
    reached: Callable[[int], None],
) -> PartResult:
    """Fold one share of the executions into the new tables (which exist already)."""
    reader = LogReader(
        ledger,
        page_size,
        topics=EXECUTION_TOPICS,
        part=(part.index, part.count),
        views=FOLD_VIEWS,
    )
    folder = Folder(database, tables, reader, isolation)
    stubs = JobStubs()
    replay = Replay(folder.output, stubs)
    events = folder.replay(replay, part.stop, reached)
    folder.fold_late(replay)
    replay.flush_executions()
    return _result(replay, stubs, events, isolation)


def _result(replay: Replay, stubs: JobStubs, events: int, isolation: Isolation) -> PartResult:
    fold = replay.fold
    positions = replay.latest or {}
    latest = {
        job: (positions[job], row["last_execution_id"], row["last_status"], row[_FINISHED])
        for job, row in stubs.items()
        if job in positions
    }
    return PartResult(
        events,
        latest,
        dict(fold.stats),
        dict(fold.histograms),
        {key: count for key, count in fold.status_counts.items() if key[0] == EXECUTION_KIND},
        isolation.isolated,
        isolation.count,
        dict(isolation.unrecorded),
    )


def merge(fold: Fold, result: PartResult, isolation: Isolation, chosen: dict[str, int]) -> int:
    """Add a share's answer to ``fold`` (the jobs' fold); returns the events it read.
    ``chosen``: for each job, the position of the latest creation merged so far."""
    for job_id, (position, execution_id, status, finished_at) in result.latest.items():
        row = fold.jobs.get(job_id)
        if row is None or chosen.get(job_id, -1) > position:
            continue
        chosen[job_id] = position
        row.update(
            last_execution_id=execution_id, last_status=status, last_finished_at_ms=finished_at
        )
    for minute, counts in result.stats.items():
        into = fold.stats[minute]
        for index, count in enumerate(counts):
            into[index] += count
    fold.histograms.update(result.histograms)
    fold.status_counts.update(result.status_counts)
    isolation.absorb(result.isolated, result.isolated_count, result.unrecorded)
    return result.events
