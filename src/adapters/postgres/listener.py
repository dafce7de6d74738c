"""LISTEN on PostgreSQL's channels in a thread of its own, waking followers at each
notification (and at each reconnection: what was missed meanwhile, a page catches)."""

import threading
from collections.abc import Sequence
from typing import Any

import psycopg
import structlog

from jobledger.infra.background import Background
from jobledger.projections.log.reader import StepHealth, Wakeup

log = structlog.get_logger(__name__)

# How often the listening thread looks for a listener started meanwhile (a started
# listener waits that long at most for its LISTEN); notifications wake it at once.
LOOK_EVERY = 0.1
# The longest a listener's start waits for the connection (a server that is down: the
# followers poll meanwhile, and the thread keeps trying).
START_WAIT = 1.0


class PostgresChannels:
    """One listening connection for every channel a process follows (the scheduler's
    log and outbox): ``listen`` gives each follower a ``Listener`` of its own, and the
    connection LISTENs on the channels of those started, in a thread of its own.

    A process then holds one connection for its wake-ups, not one per channel (a
    server's slots are shared by every process of every installation on it)."""

    def __init__(self, conninfo: str, *, reconnect_delay: float = 0.5) -> None:
        self._conninfo = conninfo
        self._reconnect_delay = reconnect_delay
        self._lock = threading.Lock()
        self._started: list[ChannelListener] = []
        self._thread: _ChannelThread | None = None

    def listen(
        self, channel: str, wakeups: Sequence[Wakeup], *, health: StepHealth | None = None
    ) -> "ChannelListener":
        return ChannelListener(self, channel, tuple(wakeups), health)

    def subscriptions(self) -> list["ChannelListener"]:
        with self._lock:
            return list(self._started)

    def _add(self, subscription: "ChannelListener") -> None:
        with self._lock:
            self._started.append(subscription)
            # A running connection LISTENs on a new channel within ``LOOK_EVERY``.
            if self._thread is None:
                self._thread = _ChannelThread(self, self._conninfo, self._reconnect_delay)
                self._thread.start()

    def _remove(self, subscription: "ChannelListener") -> "_ChannelThread | None":
        with self._lock:
            if subscription in self._started:
                self._started.remove(subscription)
            if self._started or self._thread is None:
                return None
            thread, self._thread = self._thread, None
        thread.stop()
        return thread

    @property
    def thread(self) -> "_ChannelThread | None":
        """The thread of the listening connection, while a listener is started."""
        return self._thread

    @property
    def connections(self) -> int:
        thread = self._thread
        return 0 if thread is None else thread.connections

    @property
    def backend_pid(self) -> int | None:
        thread = self._thread
        return None if thread is None else thread.backend_pid


class ChannelListener:
    """A follower's wake-ups on one channel of a shared listening connection."""

    def __init__(
        self,
        channels: PostgresChannels,
        channel: str,
        wakeups: tuple[Wakeup, ...],
        health: StepHealth | None,
    ) -> None:
        self.channel = channel
        self.wakeups = wakeups
        self.health = health
        self._channels = channels
        self.listening = threading.Event()  # set once the connection LISTENs on its channel
        self._running = False
        self._ended: _ChannelThread | None = None

    @property
    def connections(self) -> int:
        return self._channels.connections

    @property
    def backend_pid(self) -> int | None:
        """The listening connection's server process (tests terminate it)."""
        return self._channels.backend_pid

    def start(self) -> None:
        """Listen: once this returns (or after ``START_WAIT`` if the server cannot be
        reached), a commit on the channel wakes its followers."""
        self._running = True
        self._channels._add(self)  # noqa: SLF001 (the pair works as one)
        self.listening.wait(START_WAIT)

    def stop(self) -> None:
        self._running = False
        self._ended = self._channels._remove(self)  # noqa: SLF001 (the pair works as one)

    def wait(self, timeout: float | None = None) -> bool:
        """True once it has ended: stopped (and the connection's thread with it, if it
        was the last), or the thread it listens through has ended by itself."""
        if not self._running:
            return self._ended is None or self._ended.wait(timeout)
        thread = self._channels.thread
        return thread is None or thread.wait(timeout)

    def wake(self) -> None:
        for wakeup in self.wakeups:
            wakeup.set()


class _ChannelThread(Background):
    def __init__(self, channels: PostgresChannels, conninfo: str, reconnect_delay: float) -> None:
        self._channels = channels
        self._conninfo = conninfo
        self._reconnect_delay = reconnect_delay
        self.connections = 0
        self.backend_pid: int | None = None
        super().__init__("listen")

    def _run(self) -> None:
        while not self._stopping.is_set():
            pause = self._reconnect_delay
            try:
                self._listen()
            except psycopg.Error as error:
                pause = max(pause, self._failed(error))
            self._wake_all()  # what was missed while disconnected, a page catches
            self._stopping.wait(pause)

    def _failed(self, error: psycopg.Error) -> float:
        outages = [s.health.failed(error) for s in self._channels.subscriptions() if s.health]
        if not any(o is not None for o in outages):
            log.warning("log.listen_lost", error=str(error))
        return max((o for o in outages if o is not None), default=0.0)

    def _listen(self) -> None:
        with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as conn:
            listening: set[str] = set()
            self.connections += 1
            self.backend_pid = conn.info.backend_pid
            while not self._stopping.is_set():
                self._listen_to_new(conn, listening)
                for notify in conn.notifies(timeout=LOOK_EVERY, stop_after=1):
                    for subscription in self._channels.subscriptions():
                        if subscription.channel == notify.channel:
                            subscription.wake()

    def _listen_to_new(self, conn: psycopg.Connection[Any], listening: set[str]) -> None:
        subscriptions = self._channels.subscriptions()
        new = {s.channel for s in subscriptions} - listening
        for channel in sorted(new):
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            listening.add(channel)
            log.info("log.listening", channel=channel, pid=conn.info.backend_pid)
        for subscription in subscriptions:
            if subscription.channel in new:
                if subscription.health is not None:
                    subscription.health.succeeded()
                subscription.wake()  # what committed before it listened, a page catches
            subscription.listening.set()

    def _wake_all(self) -> None:
        for subscription in self._channels.subscriptions():
            subscription.wake()
