"""The Oban for Python side of throughput.py: one no-op async worker on PostgreSQL.

Oban for Python needs Python 3.12 or later: the benchmark runs this module in a virtual
environment of its own (see ``_pg_peers.py``), as ``python -m bench._peer_cli oban
setup|enqueue|work``, from the repository. Settings from Oban's documentation:

- one queue whose limit is the slots (the jobs one node runs at once; its guides show
  limits of 5 to 50 and say I/O-bound jobs "can often use higher concurrency"), and the
  default pool of 1 to 10 connections ("a queue with a limit of 100 does not hold 100
  connections": the producer borrows one to fetch or acknowledge a batch);
- the worker runs as ``oban start`` runs it (uvloop, orjson for JSON, pruner and
  lifeline on their defaults), embedded as its "Running embedded" guide shows, without
  the telemetry logger: ``oban start`` would write a JSON line for every job, and no
  system here logs per job;
- jobs are inserted with ``enqueue_many``, one statement per call.

A completed job keeps its row in ``oban_jobs`` (state ``completed``, ``completed_at``;
the pruner removes it after a day); the benchmark counts those.
"""

from __future__ import annotations

import asyncio
import signal
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import orjson
from oban import Oban, worker
from oban.schema import install
from psycopg.types.json import set_json_dumps, set_json_loads

from bench import _starts as starts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from bench._peer_cli import Send

QUEUE = "bench"
ON_UVLOOP = True  # as ``oban start`` does


@worker(queue=QUEUE, max_attempts=1)
class Noop:
    async def process(self, job: object) -> None:
        del job
        starts.note()


async def setup(dsn: str) -> None:
    pool = await Oban.create_pool(dsn)
    try:
        await install(pool)
    finally:
        await pool.close()


@asynccontextmanager
async def sender(dsn: str) -> AsyncIterator[Send]:
    pool = await Oban.create_pool(dsn)
    try:
        async with Oban(pool=pool) as oban:  # no queues: a client, it runs no jobs

            async def send(count: int) -> object:
                jobs = [Noop.new({}) for _ in range(count)]  # type: ignore[attr-defined]  # from @worker
                return await oban.enqueue_many(jobs)

            yield send
    finally:
        await pool.close()


async def work(dsn: str, slots: int) -> None:
    set_json_dumps(orjson.dumps)
    set_json_loads(orjson.loads)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    pool = await Oban.create_pool(dsn)
    try:
        async with Oban(pool=pool, queues={QUEUE: slots}):
            await stop.wait()  # leaving the block lets the running jobs finish
    finally:
        await pool.close()
