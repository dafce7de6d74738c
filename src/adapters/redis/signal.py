"""The ``WorkSignal`` on Redis pub/sub: a ring is one PUBLISH of the queues' names on
one channel (a Redis Cluster refuses PUBLISH in a pipeline, so not one per queue); a
listener is a thread on a connection of its own, subscribed to it, that wakes its worker
when one of its queues is named. Pub/sub keeps nothing: a worker that was not
subscribed misses the ring, and its poll finds the run instead."""

from collections.abc import Callable, Collection, Sequence

import redis
import structlog

from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.keys import Keys
from jobledger.infra.background import Background

log = structlog.get_logger(__name__)

# How long a listener waits for a message before it looks at its stop flag.
_WAIT = 0.5
# The pause before subscribing again after the connection failed.
_RECONNECT = 1.0


class RedisWorkSignal:
    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._client = client
        self._keys = keys

    def ring(self, queues: Collection[str]) -> None:
        if queues:
            self._client.publish(self._keys.work_ready(), "\n".join(sorted(queues)))

    def listen(self, queues: Sequence[str], woken: Callable[[], None]) -> "RedisListening":
        listening = RedisListening(self._client, self._keys.work_ready(), queues, woken)
        listening.start()
        return listening


class RedisListening(Background):
    """A thread subscribed to ``channel`` that calls ``woken`` at each ring that names
    one of ``queues``."""

    def __init__(
        self,
        client: RedisClient,
        channel: str,
        queues: Sequence[str],
        woken: Callable[[], None],
    ) -> None:
        self._client = client
        self._channel = channel
        self._queues = frozenset(queue.encode() for queue in queues)
        self._woken = woken
        self.subscriptions = 0  # how often it (re)subscribed: tests read it
        self._lost = False  # said once per outage
        super().__init__("work-signal")

    def close(self) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._listen()
            except (redis.RedisError, OSError) as error:
                if not self._lost:
                    log.warning("work_signal.lost", error=str(error))
                self._lost = True
                self._stopping.wait(_RECONNECT)

    def _listen(self) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self._channel)
            self.subscriptions += 1
            if self._lost:
                log.info("work_signal.restored", queues=len(self._queues))
                self._lost = False
            # What rang while it was not subscribed, the worker's next look finds.
            self._woken()
            while not self._stopping.is_set():
                message = pubsub.get_message(timeout=_WAIT)
                if message is not None and self._mine(message["data"]):
                    self._woken()
        finally:
            pubsub.close()

    def _mine(self, data: object) -> bool:
        """Whether a ring names one of this listener's queues."""
        named = data.split(b"\n") if isinstance(data, bytes) else []
        return not self._queues.isdisjoint(named)
