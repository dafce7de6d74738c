"""Counting finished tasks in Redis, for the Celery and Dramatiq tasks of throughput.py.

Neither library records completions without a result backend, so each no-op task adds
one pipelined round trip of its own: it raises a counter and keeps the earliest and the
latest completion time (``ZADD LT`` / ``GT``), which gives the drain's span exactly
without polling finely. Both task modules and the benchmark import this file from the
folder the benchmark copies it into.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

DONE = "bench:done"
TIMES = "bench:times"  # members "first" and "last", scored by Unix time


def record(client: redis.Redis) -> None:
    now = time.time()
    pipe = client.pipeline(transaction=False)
    pipe.incr(DONE)
    pipe.zadd(TIMES, {"first": now}, lt=True)
    pipe.zadd(TIMES, {"last": now}, gt=True)
    pipe.execute()


def count(client: redis.Redis) -> int:
    value = client.get(DONE)
    return int(value) if value is not None else 0


def span(client: redis.Redis) -> tuple[float, float] | None:
    """(first, last) completion as Unix times, or None before the first one."""
    first, last = client.zscore(TIMES, "first"), client.zscore(TIMES, "last")
    if first is None or last is None:
        return None
    return float(first), float(last)


def reset(client: redis.Redis) -> None:
    client.delete(DONE, TIMES)
