"""The Celery side of throughput.py: one no-op task on a Redis broker.

Imported by ``celery -A bench._celery_tasks worker`` (run from the repository) and by
the benchmark; ``BENCH_BROKER_URL`` names the private redis-server and a
database number of its own. No result backend: completions are counted by
``_completions.record``.
"""

from __future__ import annotations

import os

import redis
from celery import Celery

from bench import _completions as completions
from bench import _starts as starts

QUEUE = "bench"
BROKER_URL = os.environ["BENCH_BROKER_URL"]

app = Celery("bench_throughput", broker=BROKER_URL)
app.conf.update(
    task_ignore_result=True,
    # Acknowledged once the task has run, as a jobledger lease ends with the outcome:
    # a worker that dies mid-task leaves it to be delivered again.
    task_acks_late=True,
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
_counter = redis.Redis.from_url(BROKER_URL)


@app.task(name="bench.noop")  # type: ignore[untyped-decorator]  # Celery is untyped
def noop() -> None:
    starts.note()
    completions.record(_counter)
