"""Events per second appended to the event store: single saves vs the group-commit writer.

Creates a throwaway PostgreSQL database (or, with ``--sqlite``, a SQLite file in a
temporary folder), migrates it, runs each scenario in freshly spawned processes and
removes the store at the end, also on an error or Ctrl-C.

    python -m bench.event_store [--quick] [--sqlite] [--admin-url URL]

Every aggregate is a new ``Execution`` with one pending event, built before the clock
starts. A writer row runs enough producer threads per process to keep full batches
waiting (each thread submits one aggregate and waits for its future), and ends at its
event count or its time cap, whichever comes first. Latency is the submit -> saved
round trip of one aggregate (for the single row: one ``ledger.save`` call).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bench import _support as support
from jobledger.adapters.store import migrate, open_ledger
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.infra.settings import load_settings
from jobledger.infra.writer import GroupCommitWriter

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Sequence
    from multiprocessing.context import SpawnContext, SpawnProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

    from jobledger.persistence.ledger import Ledger

MAX_DELAY = 0.005
MIN_THREADS = 64
BARRIER_TIMEOUT = 120.0
SPEC = ExecutionSpec(handler="test.echo")


@dataclass(frozen=True)
class Scenario:
    name: str
    processes: int
    batch: int  # 0: no writer, one ledger.save per aggregate
    events: int  # upper bound, over all processes
    seconds: float  # time cap per process

    @property
    def threads(self) -> int:
        return max(MIN_THREADS, 2 * self.batch) if self.batch else 1


@dataclass(frozen=True)
class WorkerResult:
    events: int = 0
    started: float = 0.0  # wall clock, comparable across processes
    finished: float = 0.0
    batches: int = 0
    latencies: list[float] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True)
class Row:
    scenario: str
    processes: int
    batch: int | None
    threads: int
    events: int
    seconds: float
    events_per_s: float
    mean_batch: float | None
    p50_ms: float
    p99_ms: float


# ---- scenarios ------------------------------------------------------------------------


def scenarios(*, quick: bool) -> list[Scenario]:
    """Counts are upper bounds; the time cap keeps rows of one transaction per event short."""
    cap = 1.0 if quick else 5.0
    counts = (
        {0: 40, 1: 60, 10: 300, 100: 1000} if quick else {0: 2000, 1: 4000, 10: 30000, 100: 80000}
    )
    rows = [Scenario("single", 1, 0, counts[0], cap)]
    for processes in (1, 2):
        rows += [Scenario(f"writer batch={b}", processes, b, counts[b], cap) for b in (1, 10, 100)]
    return rows


def new_aggregates(count: int) -> list[Execution]:
    now = datetime.now(UTC)
    return [Execution.enqueue(spec=SPEC, ready_at=now, trigger=Trigger.ADHOC) for _ in range(count)]


# ---- one process ----------------------------------------------------------------------


def worker(
    url: str, scenario: Scenario, share: int, barrier: Barrier, out: Queue[WorkerResult]
) -> None:
    """The entry point of a spawned process: measure one share of a scenario."""
    try:
        ledger = open_ledger(load_settings({}, database_url=url))
        try:
            result = measure(ledger, scenario, share, barrier)
        finally:
            ledger.close()
    except BaseException as error:  # noqa: BLE001 (the parent must hear of any failure)
        barrier.abort()
        out.put(WorkerResult(error=f"{type(error).__name__}: {error}"))
        return
    out.put(result)


def measure(ledger: Ledger, scenario: Scenario, share: int, barrier: Barrier) -> WorkerResult:
    threads = scenario.threads
    lanes = [new_aggregates(share // threads + (i < share % threads)) for i in range(threads)]
    if not scenario.batch:
        ledger.save(*new_aggregates(20))
        barrier.wait(BARRIER_TIMEOUT)
        started = time.time()
        latencies = save_each(ledger, lanes[0], time.monotonic() + scenario.seconds)
        return WorkerResult(len(latencies), started, time.time(), len(latencies), latencies)
    with GroupCommitWriter(ledger, max_batch=scenario.batch, max_delay=MAX_DELAY) as writer:
        for future in [writer.submit(a) for a in new_aggregates(2 * scenario.batch)]:
            future.result()
        before = (writer.stats.events, writer.stats.batches)
        barrier.wait(BARRIER_TIMEOUT)
        started = time.time()
        latencies = run_producers(writer, lanes, time.monotonic() + scenario.seconds)
        finished = time.time()
        events, batches = writer.stats.events - before[0], writer.stats.batches - before[1]
    return WorkerResult(events, started, finished, batches, latencies)


def save_each(ledger: Ledger, aggregates: Sequence[Execution], deadline: float) -> list[float]:
    latencies: list[float] = []
    for aggregate in aggregates:
        if time.monotonic() >= deadline:
            break
        begun = time.perf_counter()
        ledger.save(aggregate)
        latencies.append(time.perf_counter() - begun)
    return latencies


def run_producers(
    writer: GroupCommitWriter, lanes: Sequence[Sequence[Execution]], deadline: float
) -> list[float]:
    """One thread per lane; each submits its aggregates one at a time and waits."""
    results: list[list[float]] = [[] for _ in lanes]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=produce, args=(writer, lane, deadline, out, errors))
        for lane, out in zip(lanes, results, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [latency for lane in results for latency in lane]


def produce(
    writer: GroupCommitWriter,
    aggregates: Sequence[Execution],
    deadline: float,
    latencies: list[float],
    errors: list[BaseException],
) -> None:
    try:
        for aggregate in aggregates:
            if time.monotonic() >= deadline:
                return
            begun = time.perf_counter()
            writer.submit(aggregate).result()
            latencies.append(time.perf_counter() - begun)
    except BaseException as error:  # noqa: BLE001 (re-raised by run_producers)
        errors.append(error)


# ---- the parent -----------------------------------------------------------------------


def run_scenario(ctx: SpawnContext, url: str, scenario: Scenario) -> Row:
    barrier = ctx.Barrier(scenario.processes)
    out: Queue[WorkerResult] = ctx.Queue()
    shares = [scenario.events // scenario.processes] * scenario.processes
    processes = [
        ctx.Process(target=worker, args=(url, scenario, share, barrier, out), daemon=True)
        for share in shares
    ]
    try:
        for process in processes:
            process.start()
        results = collect(processes, out)
        for process in processes:
            process.join(BARRIER_TIMEOUT)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
    return summarize(scenario, results)


def collect(processes: Sequence[SpawnProcess], out: Queue[WorkerResult]) -> list[WorkerResult]:
    results: list[WorkerResult] = []
    while len(results) < len(processes):
        try:
            results.append(out.get(timeout=1.0))
        except queue.Empty:
            if all(p.exitcode is not None for p in processes):
                codes = [p.exitcode for p in processes]
                message = f"a worker process died without a result (exit codes {codes})"
                raise RuntimeError(message) from None
    failures = [r.error for r in results if r.error]
    if failures:
        raise RuntimeError("; ".join(failures))
    return results


def summarize(scenario: Scenario, results: Sequence[WorkerResult]) -> Row:
    events = sum(r.events for r in results)
    batches = sum(r.batches for r in results)
    seconds = max(r.finished for r in results) - min(r.started for r in results)
    latencies = sorted(latency for r in results for latency in r.latencies)
    return Row(
        scenario=scenario.name,
        processes=scenario.processes,
        batch=scenario.batch or None,
        threads=scenario.threads,
        events=events,
        seconds=round(seconds, 3),
        events_per_s=round(events / seconds, 1) if seconds > 0 else 0.0,
        mean_batch=round(events / batches, 1) if scenario.batch and batches else None,
        p50_ms=round(support.percentile(latencies, 0.50) * 1000, 2),
        p99_ms=round(support.percentile(latencies, 0.99) * 1000, 2),
    )


def run_all(url: str, rows: Sequence[Scenario]) -> list[Row]:
    ctx = multiprocessing.get_context("spawn")
    done: list[Row] = []
    for number, scenario in enumerate(rows, start=1):
        label = f"{number}/{len(rows)} {scenario.name}, processes={scenario.processes}"
        support.log(f"{label}: start (up to {scenario.events} events or {scenario.seconds:g}s)")
        row = run_scenario(ctx, url, scenario)
        support.log(
            f"{label}: {row.events} events in {row.seconds:.2f}s = {row.events_per_s:,.0f}/s"
        )
        done.append(row)
    return done


# ---- stores ---------------------------------------------------------------------------


@contextlib.contextmanager
def throwaway_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-") as folder:
        yield f"sqlite:///{Path(folder) / 'events.sqlite3'}"


def server_version(url: str) -> str:
    if url.startswith("sqlite:"):
        import sqlite3  # noqa: PLC0415 (only the SQLite run reports it)

        return f"SQLite {sqlite3.sqlite_version}"
    return support.postgres_version(url)


# ---- output ---------------------------------------------------------------------------

COLUMNS = (
    ("scenario", "{:<18}"),
    ("processes", "{:>9}"),
    ("batch", "{:>5}"),
    ("threads", "{:>7}"),
    ("events", "{:>7}"),
    ("seconds", "{:>7}"),
    ("events_per_s", "{:>12}"),
    ("mean_batch", "{:>10}"),
    ("p50_ms", "{:>8}"),
    ("p99_ms", "{:>8}"),
)


def show(value: object) -> str:
    """As ``support.show``, but floats from 100 on with one decimal and separators."""
    if isinstance(value, float) and value >= 100:
        return f"{value:,.1f}"
    return support.show(value)


def write_json(rows: Sequence[Row], args: argparse.Namespace, store: str) -> Path:
    backend = "sqlite" if args.sqlite else "postgres"
    suffix = ("-sqlite" if args.sqlite else "") + ("-quick" if args.quick else "")
    stem = f"event_store{suffix}"
    document = {
        "benchmark": "event_store",
        "recorded_at": support.recorded_at(),
        "backend": backend,
        "store": store,
        "quick": args.quick,
        **support.machine(),
        "writer_max_delay_s": MAX_DELAY,
        "rows": [asdict(row) for row in rows],
    }
    return support.write_json(stem, document)


# ---- entry point ----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--sqlite", action="store_true", help="run on a SQLite file instead")
    parser.add_argument("--quick", action="store_true", help="tiny counts, for a smoke test")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    store = throwaway_sqlite() if args.sqlite else support.throwaway_postgres(args.admin_url)
    try:
        with store as url:
            migrate(load_settings({}, database_url=url), progress=support.log)
            version = server_version(url)
            support.log(f"store: {version}; {os.cpu_count()} CPUs")
            rows = run_all(url, scenarios(quick=args.quick))
    except KeyboardInterrupt:
        support.log("interrupted; the store was removed")
        return 130
    print(support.format_table(rows, COLUMNS, show))
    path = write_json(rows, args, version)
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
