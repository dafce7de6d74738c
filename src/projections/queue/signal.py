"""Workers woken by new work, not by a poll (the ``WorkSignal`` port).

The queue projection rings when a page it applied made runs ready now; an idle worker
listens on its queues and leases at once. A ring can be lost (a dropped connection, a
worker that subscribed a moment late): the worker's poll still finds the run, so a lost
ring only delays it. Runs that become ready later (a retry's back-off, a run at a
future time) wait for the poll, as before.
"""

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Protocol

from jobledger.projections.queue.backend import QueueChange, QueueState


class Listening(Protocol):
    """A listener on some queues; ``close`` ends it."""

    def close(self) -> None: ...


class WorkSignal(Protocol):
    """Says that runs are ready on queues, to whoever listens on them."""

    def ring(self, queues: Collection[str]) -> None:
        """Tell the listeners of ``queues`` that runs are ready there now."""
        ...

    def listen(self, queues: Sequence[str], woken: Callable[[], None]) -> Listening:
        """Call ``woken`` (from a thread of the signal's) after each ring of one of
        ``queues``, and once whenever it (re)connects, until closed."""
        ...


def ready_queues(changes: Iterable[QueueChange], now: datetime) -> set[str]:
    """The queues where ``changes`` put a run that is ready at ``now``."""
    return {
        change.queue
        for change in changes
        if (item := change.item) is not None and item.state is QueueState.PENDING and item.at <= now
    }
