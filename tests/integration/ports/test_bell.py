"""The bell's contract (``projections.bell.Bell``), run on every backend: process
memory (the embedded mode), one Redis server and a Redis Cluster."""

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from tests.integration.ports.backends import MEMORY_AND_REDIS, redis_under_a_prefix

from jobledger.adapters.memory.bell import MemoryBell
from jobledger.adapters.redis.bell import RedisBell, RedisListening
from jobledger.adapters.redis.keys import Keys
from jobledger.projections.bell import Bell, Listening

WITHIN = 5.0  # how long a ring may take to arrive, at most


@pytest.fixture(params=MEMORY_AND_REDIS)
def bell(request: pytest.FixtureRequest) -> Bell:
    if request.param == "memory":
        return MemoryBell()
    client, keys = redis_under_a_prefix(request)
    return RedisBell(client, keys.work_ready())


class Woken:
    """Counts a listener's wake-ups; the first one comes when it starts listening."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def reached(self, count: int, within: float = WITHIN) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count >= count, within)


@pytest.fixture
def listeners() -> Iterator[list[Listening]]:
    opened: list[Listening] = []
    yield opened
    for listening in opened:
        listening.close()


def listen(bell: Bell, opened: list[Listening], *queues: str) -> Woken:
    """A listener of ``queues``, once it listens (its first wake-up came)."""
    woken = Woken()
    opened.append(bell.listen(queues, woken))
    assert woken.reached(1)
    return woken


def test_a_ring_wakes_the_listeners_of_its_queues_only(
    bell: Bell, listeners: list[Listening]
) -> None:
    """If runs become ready on a queue, then every listener of that queue is woken,
    and a listener of other queues is not."""
    mail, also_mail, reports = (
        listen(bell, listeners, "mail", "default"),
        listen(bell, listeners, "mail"),
        listen(bell, listeners, "reports"),
    )
    bell.ring({"mail"})
    assert mail.reached(2)
    assert also_mail.reached(2)
    bell.ring({"reports"})  # after mail's ring, so mail's would have arrived first
    assert reports.reached(2)
    assert (mail.count, also_mail.count, reports.count) == (2, 2, 2)


def test_a_closed_listener_is_not_woken(bell: Bell, listeners: list[Listening]) -> None:
    """If a listener is closed, then later rings of its queue do not wake it."""
    closed = listen(bell, listeners, "mail")
    listeners.pop().close()
    witness = listen(bell, listeners, "mail")
    bell.ring({"mail"})
    assert witness.reached(2)
    assert closed.count == 1


def test_a_ring_of_no_listener_is_harmless(bell: Bell) -> None:
    """If nobody listens on a queue, then ringing it raises nothing."""
    bell.ring({"nobody"})
    bell.ring(set())


@pytest.mark.redis
def test_a_listener_subscribes_again_after_its_connection_drops(
    redis_client: redis.Redis, listeners: list[Listening]
) -> None:
    """If a Redis listener's connection is killed, then it subscribes again, wakes its
    worker once more (a ring may have been missed meanwhile) and hears later rings."""
    bell = RedisBell(redis_client, Keys(f"t{uuid.uuid4().hex[:10]}").work_ready())
    woken = listen(bell, listeners, "mail")
    listening = listeners[0]
    assert isinstance(listening, RedisListening)
    redis_client.client_kill_filter(_type="pubsub")
    assert woken.reached(2, within=10)
    deadline = time.monotonic() + 10
    while listening.subscriptions < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listening.subscriptions == 2
    bell.ring({"mail"})
    assert woken.reached(3)
