"""The open-executions checkpoint: the queue fold kept in SQL with its position.

It lives in the event store's database and is updated exactly once per event: the rows
and the position commit in one transaction. A Redis rebuild reads it (cost grows with
open executions, not with all history) and then follows the log from its position.

Each row keeps the entry as the Redis queue stores it (``queue_entries``): the msgpack
item, and beside it the fields that place it (queue, state, priority, lease id, score).
A rebuild copies those bytes; only the embedded mode decodes them into items.

Each queue's pause record (``QueuePause``) and each named limit (``NamedLimit``) are
kept beside them, committed with the same position, so a rebuild from the checkpoint
pauses and limits what the log paused and limited.
"""

from collections.abc import Iterator, Sequence
from typing import Protocol
from uuid import UUID

from jobledger.projections.queue.backend import (
    NamedLimit,
    QueueChange,
    QueueItem,
    QueuePause,
    QueueState,
)
from jobledger.projections.queue.entries import EncodedEntry

CHECKPOINT = "queue-checkpoint"
SNAPSHOT_BATCH = 10_000  # entries per batch of ``entries`` and ``snapshot``


class Checkpoint(Protocol):
    """Open executions and the log position they were folded to, in the event store's
    database."""

    def position(self) -> int: ...

    def commit(
        self,
        changes: Sequence[QueueChange],
        position: int | None,
        *,
        pauses: Sequence[QueuePause] = (),
        limits: Sequence[NamedLimit] = (),
    ) -> None:
        """Apply ``changes``, ``pauses`` and ``limits`` (each kept unless the checkpoint
        has it from a newer version; a removal leaves no tombstone) and move the position
        (unless None), in one transaction."""
        ...

    def clear(self) -> None:
        """Empty the checkpoint, at position 0."""
        ...

    def pauses(self) -> list[QueuePause]:
        """Every queue's pause record (one row per queue ever paused: a few)."""
        ...

    def limits(self) -> list[NamedLimit]:
        """Every named limit (one row per limit: a few)."""
        ...

    def entries(self, batch: int = SNAPSHOT_BATCH) -> Iterator[tuple[int, list[EncodedEntry]]]:
        """Batches of open entries as stored, each with the position they belong to.

        An empty checkpoint yields one empty batch, so its position still comes from
        the same snapshot: read apart, a commit in between would slip past a rebuild.
        """
        ...

    def load(self, execution_id: UUID) -> QueueItem | None: ...

    def pending_in(self, queue: str) -> list[UUID]:
        """The pending (not leased, not dead) executions of ``queue``, by id."""
        ...

    def open_runs_of(self, job_ids: Sequence[UUID]) -> dict[UUID, list[tuple[UUID, QueueState]]]:
        """Each job's open executions (id and state); a job with none is left out. A
        tick asks for all the due jobs it might hold back at once."""
        ...


def open_counts(checkpoint: Checkpoint, job_id: UUID) -> dict[QueueState, int]:
    """How many open executions of a job there are, by state (for overlap rules)."""
    counts: dict[QueueState, int] = {}
    for _run, state in checkpoint.open_runs_of([job_id]).get(job_id, []):
        counts[state] = counts.get(state, 0) + 1
    return counts
