"""The pgqueuer side of throughput.py: one no-op async entrypoint on PostgreSQL.

Run by the benchmark as ``python -m bench._peer_cli pgqueuer setup|enqueue|work``, from
the repository. Settings from pgqueuer's documentation (performance tuning, drivers,
benchmarks):

- the asyncpg driver over one connection per process, for the worker as for the
  producer ("about 1.7x psycopg"; "a direct asyncpg connection, not a pool, for the
  QueueManager");
- ``batch_size`` ("increase it when jobs are short-lived") from
  ``BENCH_PGQUEUER_BATCH_SIZE`` (32 without it): the benchmark tries a few and keeps
  the best; no cap on the tasks a worker runs at once (``max_concurrent_tasks``
  unset, its default): every job of a batch is an asyncio task;
- after ``install``, the table settings of ``pgq autovac`` (its checklist), and the
  default durability (every table logged);
- the worker starts through ``pgqueuer.run``, which is what ``pgq run`` calls (that
  command itself fails with typer 0.29: 'str' object has no attribute 'name'), on
  uvloop as ``pgq run`` does.

A job moves to ``pgqueuer_log`` as it ends: the row is deleted from ``pgqueuer`` and a
``successful`` log row written, in batches of ``batch_size``; the benchmark counts those.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import asyncpg
import pgqueuer
from pgqueuer import AsyncpgDriver, PgQueuer, Queries

from bench import _starts as starts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from pgqueuer import Job

    from bench._peer_cli import Send

ENTRYPOINT = "noop"
BATCH_SIZE = int(os.environ.get("BENCH_PGQUEUER_BATCH_SIZE") or 32)
PROBE_WARM_UP = 3.0  # seconds after the warm-up job, for the worker to be listening
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
    starts.note(job.payload.decode() if job.payload else "")


async def probe(dsn: str, samples: int, gap: float) -> list[tuple[str, float, float]]:
    """One job at a time, ``gap`` seconds apart, after a warm-up job: (its key, the
    time the enqueue call was made, the time it returned) each."""
    connection = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(connection))
    sent = []
    try:
        await queries.enqueue([ENTRYPOINT], [b"warm-up"], [0])
        await asyncio.sleep(PROBE_WARM_UP)
        for number in range(samples):
            key = f"probe-{number}"
            begun = time.time()
            await queries.enqueue([ENTRYPOINT], [key.encode()], [0])
            sent.append((key, begun, time.time()))
            await asyncio.sleep(gap)
    finally:
        await connection.close()
    return sent


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
