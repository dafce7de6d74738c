"""Workers woken by new work, not by a poll (ADR 100).

The queue projection rings when a page it applied made runs ready now; an idle worker
listens on its queues and leases at once. A ring can be lost (a dropped connection, a
worker that subscribed a moment late): the worker's poll still finds the run, so a lost
ring only delays it. Runs that become ready later (a retry's back-off, a run at a
future time) wait for the poll, as before.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import TypeAlias

from jobledger.projections.bell import Bell, Listening
from jobledger.projections.queue.backend import QueueChange, QueueState

# The bell the queue projection rings with the queues where runs became ready.
WorkSignal: TypeAlias = Bell


def ready_queues(changes: Iterable[QueueChange], now: datetime) -> set[str]:
    """The queues where ``changes`` put a run that is ready at ``now``."""
    return {
        change.queue
        for change in changes
        if (item := change.item) is not None and item.state is QueueState.PENDING and item.at <= now
    }


__all__ = ["Listening", "WorkSignal", "ready_queues"]
