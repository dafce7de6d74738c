"""Which scheduler acts: the leadership port, the embedded mode's, and the epochs.

A leader takes the next epoch from a counter in the event store's database
(``StoredEpochs``), so epochs in the log only grow whatever happens to the lock (the
Redis election is ``adapters.redis.leadership``). What really prevents a double fire is
the log (deterministic execution ids and the Job's expected version): see ADR 9.
"""

import threading
from typing import TYPE_CHECKING, Protocol

import structlog

if TYPE_CHECKING:
    from collections.abc import Callable

log = structlog.get_logger(__name__)


# The election reports to the outage tracker as a loop of its own (see DependencyHealth).
ELECTION = "leader-election"


class EpochSource(Protocol):
    """Hands out leader epochs that never repeat and never go backwards."""

    def next_epoch(self, above: int = 0) -> int:
        """The next epoch, and above ``above`` (an epoch seen elsewhere) too."""
        ...

    def latest_epoch(self) -> int: ...


class Leadership(Protocol):
    """Who may act now. ``tick`` is called often; ``is_leader`` before every action."""

    @property
    def epoch(self) -> int: ...

    @property
    def changes(self) -> int:
        """How often leadership was gained or lost so far."""
        ...

    def tick(self) -> None: ...

    def is_leader(self) -> bool: ...

    def release(self) -> None: ...


class LocalLeadership:
    """The embedded mode: one process, always the leader. It takes one epoch from the
    store when it starts leading, so every run of ``jobledger dev`` on a data folder
    fires under a higher epoch than the one before."""

    changes = 0

    def __init__(self, epochs: EpochSource | None = None) -> None:
        self._take: Callable[[], int] = epochs.next_epoch if epochs else lambda: 1
        self._epoch: int | None = None
        # The scheduler's tick and its releases loop read the epoch from two threads at
        # start: without the lock both took one (two leader.elected, epochs 1 and 2).
        self._taking = threading.Lock()

    @property
    def epoch(self) -> int:
        with self._taking:
            if self._epoch is None:
                self._epoch = self._take()
                log.info("leader.elected", scheduler_id="embedded", leader_epoch=self._epoch)
            return self._epoch

    def tick(self) -> None:
        _ = self.epoch  # taken before the first fire, so the log line comes first

    def is_leader(self) -> bool:
        return True

    def release(self) -> None:
        return None
