"""LISTEN on a PostgreSQL channel in a thread of its own, waking followers at each
notification (and at each reconnection: what was missed meanwhile, a page catches)."""

from collections.abc import Sequence

import psycopg
import structlog

from jobledger.infra.background import Background
from jobledger.projections.log.reader import StepHealth, Wakeup

log = structlog.get_logger(__name__)


class PostgresListener(Background):
    """A thread that LISTENs on ``channel`` and wakes followers; it reconnects (a ``Listener``)."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        wakeups: Sequence[Wakeup],
        *,
        reconnect_delay: float = 0.5,
        health: StepHealth | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._health = health
        self._channel = channel
        self._wakeups = tuple(wakeups)
        self._reconnect_delay = reconnect_delay
        self.connections = 0  # how often it (re)connected: tests and metrics read it
        self.backend_pid: int | None = None
        super().__init__("listen")

    def _run(self) -> None:
        while not self._stopping.is_set():
            pause = self._reconnect_delay
            try:
                self._listen()
            except psycopg.Error as error:
                outage = None if self._health is None else self._health.failed(error)
                if outage is None:
                    log.warning("log.listen_lost", channel=self._channel, error=str(error))
                pause = max(pause, outage or 0.0)
            # Whatever was missed while disconnected, the poll or this wake-up catches.
            self._wake()
            self._stopping.wait(pause)

    def _listen(self) -> None:
        with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self._channel)))
            self.connections += 1
            if self._health is not None:
                self._health.succeeded()
            self.backend_pid = conn.info.backend_pid
            log.info("log.listening", channel=self._channel, pid=self.backend_pid)
            self._wake()
            while not self._stopping.is_set():
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    self._wake()

    def _wake(self) -> None:
        for wakeup in self._wakeups:
            wakeup.set()
