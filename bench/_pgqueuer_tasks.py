"""The pgqueuer side of throughput.py: one no-op async entrypoint on PostgreSQL.

Run by the benchmark as ``python -m bench._peer_cli pgqueuer setup|enqueue|work``, from
the repository. Settings from pgqueuer's documentation (performance tuning, drivers,
benchmarks):

- the asyncpg driver over one connection per process, for the worker as for the
  producer ("about 1.7x psycopg"; "a direct asyncpg connection, not a pool, for the
  QueueManager");
- ``batch_size`` 32 ("increase it when jobs are short-lived"), no cap on the tasks a
  worker runs at once (``max_concurrent_tasks`` unset, its default): every job of a
  batch is an asyncio task;
- after ``install``, the table settings of ``pgq autovac`` (its checklist), and the
  default durability (every table logged);
- the worker starts through ``pgqueuer.run``, which is what ``pgq run`` calls (that
  command itself fails with typer 0.29: 'str' object has no attribute 'name'), on
  uvloop as ``pgq run`` does.

A job moves to ``pgqueuer_log`` as it ends: the row is deleted from ``pgqueuer`` and a
``successful`` log row written, in batches of ``batch_size``; the benchmark counts those.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import asyncpg
import pgqueuer
from pgqueuer import AsyncpgDriver, PgQueuer, Queries

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from pgqueuer import Job

    from bench._peer_cli import Send

ENTRYPOINT = "noop"
BATCH_SIZE = 32
ON_UVLOOP = True  # as ``pgq run`` does


async def setup(dsn: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        await queries.optimize_autovacuum()
    finally:
        await connection.close()


@asynccontextmanager
async def sender(dsn: str) -> AsyncIterator[Send]:
    connection = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(connection))

    async def send(count: int) -> object:
        return await queries.enqueue([ENTRYPOINT] * count, [None] * count, [0] * count)

    try:
        yield send
    finally:
        await connection.close()


async def noop(job: Job) -> None:
    del job


@asynccontextmanager
async def worker(dsn: str) -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(dsn)
    try:
        queuer = PgQueuer(AsyncpgDriver(connection))
        queuer.entrypoint(ENTRYPOINT)(noop)
        yield queuer
    finally:
        await connection.close()


async def work(dsn: str, slots: int) -> None:
    del slots  # pgqueuer runs every job of a batch at once
    # SIGTERM and SIGINT set its shutdown event: it finishes the running jobs and stops.
    await pgqueuer.run(lambda: worker(dsn), batch_size=BATCH_SIZE)
