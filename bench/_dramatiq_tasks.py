"""The Dramatiq side of throughput.py: one no-op actor on a Redis broker.

Imported by ``dramatiq bench._dramatiq_tasks`` (which finds ``broker`` here; run from
the repository) and by the benchmark; ``BENCH_BROKER_URL`` names the
private redis-server and a database number of its own. No results middleware:
completions are counted by ``_completions.record``.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from bench import _completions as completions
from bench import _starts as starts

QUEUE = "bench"
BROKER_URL = os.environ["BENCH_BROKER_URL"]

broker = RedisBroker(url=BROKER_URL)
dramatiq.set_broker(broker)
_counter = redis.Redis.from_url(BROKER_URL)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)  # type: ignore[untyped-decorator]
def noop() -> None:
    starts.note()
    completions.record(_counter)
