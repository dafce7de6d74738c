"""The Procrastinate side of throughput.py: one no-op async task on PostgreSQL.

Run by the benchmark as ``python -m bench._peer_cli procrastinate setup|enqueue|work``,
from the repository. Settings from Procrastinate's documentation:

- the worker runs ``concurrency`` async sub-workers, one per slot (its guide "Execute
  multiple jobs at the same time" shows 30), with a ``PsycopgConnector`` pool of
  ``concurrency + 1`` connections ("the shorter your jobs, the more your pool will need
  as many connections as your concurrency, plus one"); LISTEN/NOTIFY on, finished jobs
  kept (both defaults);
- jobs are deferred with ``batch_defer_async`` ("more efficient than deferring them one
  by one");
- on asyncio's event loop, as its command line runs.

Each job keeps its row in ``procrastinate_jobs`` (status ``succeeded``) and gets a
``deferred``, a ``started`` and a ``succeeded`` row in ``procrastinate_events``; the
benchmark counts those.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from procrastinate import App, PsycopgConnector

from bench import _starts as starts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from bench._peer_cli import Send

QUEUE = "bench"
TASK = "bench.noop"
ENQUEUE_POOL = 1
ON_UVLOOP = False  # as its command line does


async def noop() -> None:
    starts.note()


def app(dsn: str, pool_size: int) -> App:
    application = App(connector=PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size))
    application.task(name=TASK, queue=QUEUE)(noop)
    return application


async def setup(dsn: str) -> None:
    async with app(dsn, ENQUEUE_POOL).open_async() as opened:
        await opened.schema_manager.apply_schema_async()


@asynccontextmanager
async def sender(dsn: str) -> AsyncIterator[Send]:
    async with app(dsn, ENQUEUE_POOL).open_async() as opened:
        task = opened.tasks[TASK]

        async def send(count: int) -> object:
            return await task.batch_defer_async(*({} for _ in range(count)))

        yield send


async def work(dsn: str, slots: int) -> None:
    async with app(dsn, slots + 1).open_async() as opened:
        # Stops on SIGTERM or SIGINT once the running jobs have finished.
        await opened.run_worker_async(queues=[QUEUE], concurrency=slots)
