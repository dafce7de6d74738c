"""What the queue contract suites share: a fixed time, the store's meta, a settable
clock, and the Redis backends to run them on."""

from datetime import UTC, datetime, timedelta

import pytest

from jobledger.projections.queue.backend import QueueMeta

AT = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
TTL = timedelta(seconds=30)
META = QueueMeta(store_id="s", epoch="e1", position=0)
Q = "default"

REDIS_BACKENDS = [
    pytest.param("redis_client", marks=pytest.mark.redis, id="redis"),
    pytest.param("cluster_client", marks=pytest.mark.redis, id="cluster"),
]


class Clock:
    """A settable clock; the backends use it to date tombstones."""

    def __init__(self) -> None:
        self.now = AT

    def __call__(self) -> datetime:
        return self.now
