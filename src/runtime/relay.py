"""The outbox relay as a part of a role: it drains the outbox when the channel says a
transaction committed a run, and every ``poll`` seconds in case a notification was
missed. What a drain does is the use case's (``services/outbox.py``)."""

from collections.abc import Callable

from jobledger.domain.clock import utc_now
from jobledger.projections.log.reader import Follower, Listen, StepHealth, Wakeup
from jobledger.schemas.outbox import OUTBOX_CHANNEL
from jobledger.services.outbox import BATCH, Outbox


class OutboxRelay:
    """A part (``runtime/lifecycle.py``): a listening thread and a loop that drains."""

    name = "outbox-relay"

    def __init__(
        self,
        listen: Listen,
        drain: Callable[[], bool],
        *,
        poll: float = 1.0,
        health: StepHealth | None = None,
    ) -> None:
        wakeup = Wakeup()
        self._listener = listen(OUTBOX_CHANNEL, [wakeup], health=health)
        self._follower = Follower(self.name, drain, wakeup, poll_interval=poll, health=health)

    def start(self) -> None:
        self._listener.start()
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()
        self._listener.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self._follower.wait(timeout)


def relay_part(
    outbox: Outbox | None, listen: Listen | None, health: StepHealth
) -> OutboxRelay | None:
    """The relay for a role that runs it (the scheduler, `jobledger dev`), woken by the
    outbox's channel (``listen``: PostgreSQL's); none without one, which the outbox
    needs."""
    if outbox is None or listen is None:
        return None

    def drain() -> bool:
        # A full batch: more may be waiting, so the relay runs again at once.
        return outbox.relay(at=utc_now()).taken >= BATCH

    return OutboxRelay(listen, drain, health=health)
