"""The ``Bell`` on Redis pub/sub: a ring is one PUBLISH of the names on the bell's
channel (a Redis Cluster refuses PUBLISH in a pipeline, so not one channel per name); a
listener is a thread on a connection of its own, subscribed to it, that calls back when
one of its names is rung. Pub/sub keeps nothing: a listener that was not subscribed
misses the ring, and its poll finds what happened instead."""

import weakref
from collections.abc import Callable, Collection, Sequence

import redis
import structlog

from jobledger.adapters.redis.client import RedisClient
from jobledger.infra.background import Background

log = structlog.get_logger(__name__)

# How long a listener waits for a message before it looks at its stop flag.
_WAIT = 0.5
# The pause before subscribing again after the connection failed.
_RECONNECT = 1.0


class RedisBell:
    def __init__(self, client: RedisClient, channel: str) -> None:
        self._client = client
        self._channel = channel  # a name from ``Keys``
        self._open: weakref.WeakSet[RedisListening] = weakref.WeakSet()

    def ring(self, names: Collection[str]) -> None:
        if names:
            self._client.publish(self._channel, "\n".join(sorted(names)))

    def listen(self, names: Sequence[str], woken: Callable[[], None]) -> "RedisListening":
        listening = RedisListening(self._client, self._channel, names, woken)
        listening.start()
        self._open.add(listening)
        return listening

    def close(self) -> None:
        for listening in list(self._open):
            listening.close()


class RedisListening(Background):
    """A thread subscribed to ``channel`` that calls ``woken`` at each ring of one of
    ``names``."""

    def __init__(
        self,
        client: RedisClient,
        channel: str,
        names: Sequence[str],
        woken: Callable[[], None],
    ) -> None:
        self._client = client
        self._channel = channel
        self._names = frozenset(name.encode() for name in names)
        self._woken = woken
        self.subscriptions = 0  # how often it (re)subscribed: tests read it
        self._lost = False  # said once per outage
        super().__init__("bell")

    def close(self) -> None:
        # Without waiting for the thread: it sees the flag within ``_WAIT`` and closes
        # its connection itself, and a worker's or a process's stop need not wait.
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._listen()
            except (redis.RedisError, OSError) as error:
                if not self._lost:
                    log.warning("bell.lost", error=str(error))
                self._lost = True
                self._stopping.wait(_RECONNECT)

    def _listen(self) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self._channel)
            self.subscriptions += 1
            if self._lost:
                log.info("bell.restored", names=len(self._names))
                self._lost = False
            # What rang while it was not subscribed, the worker's next look finds.
            self._woken()
            while not self._stopping.is_set():
                message = pubsub.get_message(timeout=_WAIT)
                # A ring that comes after ``close`` is not passed on.
                closed = self._stopping.is_set()
                if message is not None and not closed and self._mine(message["data"]):
                    self._woken()
        finally:
            pubsub.close()

    def _mine(self, data: object) -> bool:
        """Whether a ring is of one of this listener's names."""
        named = data.split(b"\n") if isinstance(data, bytes) else []
        return not self._names.isdisjoint(named)
