"""The outbox relay as a part of a role: it drains the outbox when the channel says a
transaction committed a run, and every ``poll`` seconds in case a notification was
missed. What a drain does is the use case's (``services/outbox.py``)."""

from collections.abc import Callable

from jobledger.projections.log import Follower, PostgresListener, StepHealth, Wakeup
from jobledger.schemas.outbox import OUTBOX_CHANNEL


class OutboxRelay:
    """A part (``runtime/lifecycle.py``): a LISTEN thread and a loop that drains."""

    name = "outbox-relay"

    def __init__(
        self,
        conninfo: str,
        drain: Callable[[], bool],
        *,
        poll: float = 1.0,
        health: StepHealth | None = None,
    ) -> None:
        wakeup = Wakeup()
        self._listener = PostgresListener(conninfo, OUTBOX_CHANNEL, [wakeup], health=health)
        self._follower = Follower(self.name, drain, wakeup, poll_interval=poll, health=health)

    def start(self) -> None:
        self._listener.start()
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()
        self._listener.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self._follower.wait(timeout)
