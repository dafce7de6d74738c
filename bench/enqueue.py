"""Batch enqueue: runs per second into the log through ``POST /api/v1/executions:batch``.

Creates a throwaway PostgreSQL database and a private redis-server, then starts one or
two ``python -m jobledger.cli api`` processes (no projector: the rows measure the way
into the log, and a projector catches up afterwards) in sessions of their own. Client
processes call ``Client.enqueue_many`` with 1,000 ad-hoc runs of ``test.echo`` a
request, each on a queue no worker leases, as fast as the answers come. Stops
everything and drops the database at the end, also on an error or Ctrl-C.

    python -m bench.enqueue [--quick] [--batches N] [--rounds N]
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from eventsourcing.utils import get_topic

from bench import _support as support
from bench.api import Api, api_env, sign_in
from jobledger.adapters.store import migrate
from jobledger.client import Client
from jobledger.domain.execution import Execution
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Sequence
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

BATCH = 1_000  # runs per request, the most the API takes
IDLE_QUEUE = "bench-idle"
# (API processes, client processes): one API as one client drives it, then as many
# clients as cores; two APIs, one client each and two each.
SHAPES = ((1, 1), (1, 2), (2, 2), (2, 4))
COLUMNS: support.Columns = (
    ("apis", "{:>4}"),
    ("clients", "{:>7}"),
    ("runs", "{:>8}"),
    ("seconds", "{:>8}"),
    ("runs_per_s", "{:>10}"),
    ("best_per_s", "{:>10}"),
    ("p50_ms", "{:>7}"),
    ("p99_ms", "{:>7}"),
    ("api_cpu_us", "{:>10}"),
    ("pg_cpu_us", "{:>9}"),
    ("in_log", "{:>6}"),
)


@dataclass
class Row:
    apis: int
    clients: int
    runs: int  # per round
    seconds: float  # median round
    runs_per_s: float  # median round
    best_per_s: float
    p50_ms: float  # of one request, over every round
    p99_ms: float
    api_cpu_us: float  # CPU of the API processes per run, median round
    pg_cpu_us: float  # CPU of PostgreSQL's processes per run, median round
    in_log: bool  # the log holds one Enqueued event per run sent, in every round


def _client(base_url: str, token: str, batches: int, start: Event, out: Queue[list[float]]) -> None:
    """A client process: one batch to warm up, then ``batches`` once ``start`` is set;
    its latencies go to ``out``."""
    payloads = [{"n": n} for n in range(BATCH)]
    latencies: list[float] = []
    with Client(base_url, token) as client:
        client.enqueue_many("test.echo", payloads, queue=IDLE_QUEUE)  # warm: connection, code
        out.put([])
        start.wait()
        for _ in range(batches):
            sent = time.perf_counter()
            client.enqueue_many("test.echo", payloads, queue=IDLE_QUEUE)
            latencies.append(time.perf_counter() - sent)
    out.put(latencies)


@dataclass
class Round:
    seconds: float
    latencies: list[float]
    api_cpu: float
    pg_cpu: float
    enqueued: int  # Enqueued events the log gained


def one_round(url: str, apis: Sequence[tuple[Api, str]], clients: int, batches: int) -> Round:
    """``clients`` client processes spread over ``apis``, released together once each
    has sent a batch to warm up."""
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()  # type: Event, Queue[list[float]]
    processes = [
        context.Process(
            target=_client,
            args=(apis[i % len(apis)][0].base_url, apis[i % len(apis)][1], batches, start, out),
        )
        for i in range(clients)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        out.get(timeout=120)  # each has warmed up
    api_pids = [pid for api, _ in apis for pid in support.process_tree(api.pid)]
    postgres = postgres_pids(url)
    before = enqueued_runs(url)
    cpu_before = support.cpu_seconds(api_pids), support.cpu_seconds(postgres)
    begun = time.perf_counter()
    start.set()
    latencies = [value for _ in processes for value in out.get(timeout=600)]
    seconds = time.perf_counter() - begun
    cpu_after = support.cpu_seconds(api_pids), support.cpu_seconds(postgres)
    for process in processes:
        process.join(timeout=30)
    return Round(
        seconds,
        latencies,
        cpu_after[0] - cpu_before[0],
        cpu_after[1] - cpu_before[1],
        enqueued_runs(url) - before,
    )


def postgres_pids(url: str) -> list[int]:
    """PostgreSQL's own processes and the sessions of the benchmark's database."""
    database = f" {url.rpartition('/')[2]} "
    return support.pids_named("postgres", title=lambda t: database in t or "(" not in t)


def enqueued_runs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM jobledger_events WHERE topic = %s",
            (get_topic(Execution.Enqueued),),
        ).fetchone()
    return int(row[0]) if row else 0


def measure(url: str, apis: Sequence[tuple[Api, str]], clients: int, size: Sizes) -> Row:
    rounds, in_log = [], True
    for number in range(size.rounds):
        done = one_round(url, apis, clients, size.batches)
        in_log &= done.enqueued == clients * size.batches * BATCH
        rounds.append(done)
        support.log(
            f"  round {number + 1}/{size.rounds}: "
            f"{clients * size.batches * BATCH / done.seconds:,.0f} runs/s"
        )
    runs = clients * size.batches * BATCH
    middle = sorted(rounds, key=lambda r: r.seconds)[len(rounds) // 2]
    ordered = sorted(value for r in rounds for value in r.latencies)
    return Row(
        apis=len(apis),
        clients=clients,
        runs=runs,
        seconds=round(middle.seconds, 2),
        runs_per_s=round(runs / middle.seconds),
        best_per_s=round(runs / min(r.seconds for r in rounds)),
        p50_ms=round(statistics.median(ordered) * 1000, 1),
        p99_ms=round(support.percentile(ordered, 0.99) * 1000, 1),
        api_cpu_us=round(middle.api_cpu / runs * 1e6, 1),
        pg_cpu_us=round(middle.pg_cpu / runs * 1e6, 1),
        in_log=in_log,
    )


@dataclass
class Sizes:
    batches: int  # per client and round
    rounds: int


@contextlib.contextmanager
def api_processes(
    folder: Path, url: str, redis_url: str, count: int
) -> Iterator[list[tuple[Api, str]]]:
    started: list[Api] = []
    try:
        for number in range(count):
            own = folder / f"api{number}"
            own.mkdir(parents=True)
            started.append(
                Api(own, api_env(url, redis_url, support.free_port()), with_projector=False)
            )
        for api in started:
            support.log(f"API on port {api.port} up after {api.wait_healthy():.1f} s")
        yield [(api, sign_in(api.base_url)) for api in started]
    finally:
        for api in started:
            api.stop()


def run(args: argparse.Namespace, size: Sizes, folder: Path) -> tuple[list[Row], str]:
    rows = []
    with (
        support.throwaway_postgres(args.admin_url) as url,
        support.private_redis() as redis_url,
    ):
        migrate(load_settings({}, database_url=url), progress=lambda _: None)
        store = support.versions(url, redis_url)
        for count in sorted({apis for apis, _ in SHAPES}):
            with api_processes(folder / str(count), url, redis_url, count) as apis:
                for clients in (c for a, c in SHAPES if a == count):
                    support.log(f"{count} API process(es), {clients} client process(es)")
                    rows.append(measure(url, apis, clients, size))
    return rows, store


def main(argv: Sequence[str] | None = None) -> int:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke test, about 30 s")
    parser.add_argument("--batches", type=int, help="requests per client and round (default 40)")
    parser.add_argument("--rounds", type=int, help="rounds per row; the median counts (default 5)")
    args = parser.parse_args(argv)
    size = Sizes(
        batches=args.batches or (5 if args.quick else 40),
        rounds=args.rounds or (1 if args.quick else 5),
    )
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-enqueue-") as folder:
        rows, store = run(args, size, Path(folder))
    print(support.format_table(rows, COLUMNS))
    support.write_rows("enqueue", quick=args.quick, store=store, sizes=size, rows=rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
