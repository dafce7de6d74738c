"""The Python client: enqueues per second beside raw HTTP, and how long wait() takes.

Creates a throwaway PostgreSQL database and a private redis-server, then starts
``python -m jobledger.cli api --with-projector`` and ``python -m jobledger.cli worker``
in sessions of their own (the test handlers on); stops them and drops the database at
the end, also on an error or Ctrl-C.

    python -m bench.client [--quick] [--runs N] [--in-flight N] [--admin-url URL]

Enqueue rows post ad-hoc runs of ``test.echo`` to a queue no worker leases, so they
measure the API's write path as each client drives it: raw httpx (the same JSON body
and an Idempotency-Key, the least a safe client sends) and ``jobledger.client``, one
request at a time (sync) and with ``--in-flight`` requests at once (async). Wait rows
enqueue on the worker's queue and wait for each result: ``Client.wait`` (a long-poll),
``AsyncClient.wait`` with ``--in-flight`` runs at once, and beside them a loop that
polls ``GET /api/v1/executions/{id}`` every 100 ms, the usual client's way. Their
latency runs from sending the enqueue to holding the result, through the worker and
the read models.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench import _support as support
from bench.api import Api, api_env, sign_in
from jobledger.adapters.store import migrate
from jobledger.client import AsyncClient, Client, NotVisibleYetError
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable, Mapping, Sequence

IDLE_QUEUE = "bench-idle"  # no worker leases it: enqueue rows measure the write path
POLL_SECONDS = 0.1
COLUMNS: support.Columns = (
    ("scenario", "{:<44}"),
    ("runs", "{:>6}"),
    ("seconds", "{:>8}"),
    ("per_s", "{:>8}"),
    ("p50_ms", "{:>8}"),
    ("p99_ms", "{:>8}"),
    ("requests_per_run", "{:>16}"),
)


@dataclass
class Row:
    scenario: str
    runs: int
    seconds: float
    per_s: float
    p50_ms: float
    p99_ms: float
    requests_per_run: float


def row(scenario: str, latencies: Sequence[float], seconds: float, requests: int) -> Row:
    ordered = sorted(latencies)
    return Row(
        scenario=scenario,
        runs=len(ordered),
        seconds=round(seconds, 2),
        per_s=round(len(ordered) / seconds, 1) if seconds else 0.0,
        p50_ms=round(support.percentile(ordered, 0.5) * 1000, 2),
        p99_ms=round(support.percentile(ordered, 0.99) * 1000, 2),
        requests_per_run=round(requests / len(ordered), 2) if ordered else 0.0,
    )


def _body(queue: str) -> dict[str, Any]:
    return {"handler": "test.echo", "payload": {"n": 1}, "queue": queue}


# ---- enqueue ------------------------------------------------------------------------------


def _one_at_a_time(runs: int, one: Callable[[], object]) -> tuple[list[float], float]:
    """``runs`` calls of ``one`` in turn: each call's latency, and the whole time."""
    latencies = []
    begun = time.perf_counter()
    for _ in range(runs):
        sent = time.perf_counter()
        one()
        latencies.append(time.perf_counter() - sent)
    return latencies, time.perf_counter() - begun


def raw_sync(base_url: str, token: str, runs: int) -> Row:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:

        def one() -> None:
            key = {"Idempotency-Key": uuid.uuid4().hex}
            http.post("/api/v1/executions", json=_body(IDLE_QUEUE), headers=key).raise_for_status()

        latencies, seconds = _one_at_a_time(runs, one)
    return row("raw httpx, one at a time", latencies, seconds, runs)


def client_sync(base_url: str, token: str, runs: int) -> Row:
    with Client(base_url, token) as client:
        latencies, seconds = _one_at_a_time(
            runs, lambda: client.enqueue("test.echo", {"n": 1}, queue=IDLE_QUEUE)
        )
    return row("Client.enqueue, one at a time", latencies, seconds, runs)


BATCH = 1000  # runs per batch request, the most the API takes


def client_many(base_url: str, token: str, runs: int) -> Row:
    """``Client.enqueue_many`` of ``runs`` runs: one request per 1,000; the latency
    columns are those of one batch request."""
    payloads = [{"n": n} for n in range(BATCH)]
    latencies: list[float] = []
    with Client(base_url, token) as client:
        begun = time.perf_counter()
        for _ in range(max(runs // BATCH, 1)):
            sent = time.perf_counter()
            client.enqueue_many("test.echo", payloads, queue=IDLE_QUEUE)
            latencies.append(time.perf_counter() - sent)
        seconds = time.perf_counter() - begun
    made = len(latencies) * BATCH
    ordered = sorted(latencies)
    return Row(
        scenario=f"Client.enqueue_many, {BATCH:,} a request",
        runs=made,
        seconds=round(seconds, 2),
        per_s=round(made / seconds, 1),
        p50_ms=round(support.percentile(ordered, 0.5) * 1000, 2),
        p99_ms=round(support.percentile(ordered, 0.99) * 1000, 2),
        requests_per_run=round(len(latencies) / made, 4),
    )


async def _in_flight(count: int, limit: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    """``count`` calls of ``one``, at most ``limit`` at once; each call's latency."""
    gate = asyncio.Semaphore(limit)
    latencies: list[float] = []

    async def timed() -> None:
        async with gate:
            sent = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - sent)

    await asyncio.gather(*(timed() for _ in range(count)))
    return latencies


async def raw_async(base_url: str, token: str, runs: int, limit: int) -> Row:
    headers = {"Authorization": f"Bearer {token}"}
    # httpx's default pool, as AsyncClient has it: 100 connections, 20 kept alive. (With
    # all 100 kept alive, uvicorn serves them unevenly: a p99 of seconds.)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:

        async def one() -> None:
            key = {"Idempotency-Key": uuid.uuid4().hex}
            answer = await http.post("/api/v1/executions", json=_body(IDLE_QUEUE), headers=key)
            answer.raise_for_status()

        begun = time.perf_counter()
        latencies = await _in_flight(runs, limit, one)
        seconds = time.perf_counter() - begun
    return row(f"raw httpx.AsyncClient, {limit} in flight", latencies, seconds, runs)


async def client_async(base_url: str, token: str, runs: int, limit: int) -> Row:
    async with AsyncClient(base_url, token, timeout=60) as client:

        async def one() -> None:
            await client.enqueue("test.echo", {"n": 1}, queue=IDLE_QUEUE)

        begun = time.perf_counter()
        latencies = await _in_flight(runs, limit, one)
        seconds = time.perf_counter() - begun
    return row(f"AsyncClient.enqueue, {limit} in flight", latencies, seconds, runs)


# ---- wait ---------------------------------------------------------------------------------


class Counting(httpx.HTTPTransport):
    """Counts the requests a client sends."""

    sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


def client_wait(base_url: str, token: str, runs: int) -> Row:
    transport = Counting()
    with Client(base_url, token, transport=transport) as client:
        latencies, seconds = _one_at_a_time(
            runs, lambda: client.wait(client.enqueue("test.echo", {"n": 1}), timeout=60)
        )
    return row("Client enqueue + wait(), one at a time", latencies, seconds, transport.sent)


def polling_wait(base_url: str, token: str, runs: int) -> Row:
    """What a client without the long-poll does: GET every 100 ms until it is done."""
    transport = Counting()
    with Client(base_url, token, transport=transport) as client:

        def one() -> None:
            run = client.enqueue("test.echo", {"n": 1})
            while not _finished(client, run.id):
                time.sleep(POLL_SECONDS)

        latencies, seconds = _one_at_a_time(runs, one)
    return row("enqueue + GET every 100 ms, one at a time", latencies, seconds, transport.sent)


def _finished(client: Client, execution_id: uuid.UUID) -> bool:
    try:
        return client.get_execution(execution_id).execution.status == "completed"
    except NotVisibleYetError:  # enqueued, not in the read model yet
        return False


async def async_wait(base_url: str, token: str, runs: int, limit: int) -> Row:
    async with AsyncClient(base_url, token, timeout=60) as client:

        async def one() -> None:
            await client.wait(await client.enqueue("test.echo", {"n": 1}), timeout=60)

        begun = time.perf_counter()
        latencies = await _in_flight(runs, limit, one)
        seconds = time.perf_counter() - begun
    return row(f"AsyncClient enqueue + wait(), {limit} in flight", latencies, seconds, 2 * runs)


# ---- the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    enqueues: int
    waits: int
    in_flight: int


def measure(base_url: str, token: str, size: Sizes) -> list[Row]:
    support.log("warming up")
    raw_sync(base_url, token, 100)
    asyncio.run(raw_async(base_url, token, size.in_flight, size.in_flight))
    client_wait(base_url, token, 5)
    steps: list[tuple[str, Callable[[], Row]]] = [
        ("raw httpx", lambda: raw_sync(base_url, token, size.enqueues)),
        ("Client.enqueue", lambda: client_sync(base_url, token, size.enqueues)),
        (
            "raw httpx.AsyncClient",
            lambda: asyncio.run(raw_async(base_url, token, size.enqueues, size.in_flight)),
        ),
        (
            "AsyncClient.enqueue",
            lambda: asyncio.run(client_async(base_url, token, size.enqueues, size.in_flight)),
        ),
        ("Client.enqueue_many", lambda: client_many(base_url, token, size.enqueues * 10)),
        ("Client.wait", lambda: client_wait(base_url, token, size.waits)),
        ("polling", lambda: polling_wait(base_url, token, size.waits)),
        (
            "AsyncClient.wait",
            lambda: asyncio.run(async_wait(base_url, token, size.in_flight, size.in_flight)),
        ),
    ]
    rows = []
    for name, step in steps:
        support.log(f"measuring {name}")
        rows.append(step())
    return rows


def worker(folder: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with (folder / "worker.log").open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", "worker"],
            stdout=output,
            stderr=output,
            env=dict(env),
            cwd=folder,
            start_new_session=True,
        )


def run(args: argparse.Namespace, size: Sizes, folder: Path) -> tuple[list[Row], str]:
    with (
        support.throwaway_postgres(args.admin_url) as url,
        support.private_redis() as redis_url,
    ):
        migrate(load_settings({}, database_url=url), progress=lambda _: None)
        store = support.versions(url, redis_url)
        env = api_env(url, redis_url, support.free_port()) | {"JOBLEDGER_WORKER_SLOTS": "16"}
        api = Api(folder, env)
        runner = None
        try:
            support.log(f"API up after {api.wait_healthy():.1f} s")
            runner = worker(folder, env)
            return measure(api.base_url, sign_in(api.base_url), size), store
        finally:
            if runner is not None:
                support.stop_group(runner)
            api.stop()
            support.log("stopped the API and the worker")


def main(argv: Sequence[str] | None = None) -> int:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke test, a few seconds")
    parser.add_argument("--runs", type=int, help="enqueues per row (default 2000; 200 quick)")
    parser.add_argument("--in-flight", type=int, default=100, help="async requests at once")
    args = parser.parse_args(argv)
    enqueues = args.runs or (200 if args.quick else 2000)
    size = Sizes(enqueues=enqueues, waits=30 if args.quick else 200, in_flight=args.in_flight)
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-client-") as folder:
        rows, store = run(args, size, Path(folder))
    print(support.format_table(rows, COLUMNS))
    support.write_rows("client", quick=args.quick, store=store, sizes=size, rows=rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
