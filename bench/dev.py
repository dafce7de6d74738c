"""The embedded default as a newcomer runs it: ``jobledger dev`` (SQLite, the in-memory
queue, every role in one process), fed through its REST API.

    python -m bench.dev [--jobs N] [--repeat R] [--slots S]

Starts ``jobledger dev --no-demo`` in a throwaway data folder, makes an operator token
with ``jobledger token create``, sends N runs of a no-op handler through the batch route
(``enqueue_many``, 1,000 runs a request, as ``bench.throughput`` sends), and waits
until the queue is empty: every run leased, completed and acknowledged, which a worker
does only once its outcome is in the log. Prints, per round, the time to accept the
runs, the time from the first request to the empty queue, runs a second over that, and
the CPU the process used over it (ms a run). The process runs all rounds; the first
round includes no start-up (the API answered before it began).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from bench import _jobledger_tasks as tasks
from bench import _rounds as rounds
from bench import _support as support
from bench.throughput import ADMIN_PASSWORD, RUNS_PER_MINUTE, send_batches

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

DEFAULT_JOBS = 5_000
READY_TIMEOUT = 60.0
DRAIN_TIMEOUT = 600.0
POLL = 0.05  # seconds between reads of the queue's depths


@dataclass(frozen=True)
class Round:
    repetition: int
    jobs: int
    accepted_s: float
    drained_s: float
    runs_per_s: float
    cpu_ms_per_run: float


COLUMNS = (
    ("repetition", "{:>10}"),
    ("jobs", "{:>7}"),
    ("accepted_s", "{:>10}"),
    ("drained_s", "{:>9}"),
    ("runs_per_s", "{:>10}"),
    ("cpu_ms_per_run", "{:>14}"),
)


class Dev:
    """``jobledger dev`` as a process in a data folder of its own, and a token."""

    def __init__(self, folder: Path, processes: rounds.Processes, slots: int) -> None:
        self.processes = processes
        port = support.free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.env = rounds.subprocess_env(
            JOBLEDGER_DATA_DIR=str(folder),
            JOBLEDGER_API_PORT=str(port),
            JOBLEDGER_HANDLERS=tasks.HANDLERS,
            JOBLEDGER_TEST_HANDLERS="false",
            JOBLEDGER_WORKER_SLOTS=str(slots),
            JOBLEDGER_ADMIN_PASSWORD=ADMIN_PASSWORD,
            JOBLEDGER_API_RUNS_PER_MINUTE=str(RUNS_PER_MINUTE),
            JOBLEDGER_LOG_LEVEL="warning",
        )
        self.command = [sys.executable, "-m", "jobledger.cli"]
        self.process = processes.start(
            "jobledger-dev", [*self.command, "dev", "--no-demo"], self.env
        )
        support.wait_for(self._serving, READY_TIMEOUT, "jobledger dev's API", poll=0.1)
        self.token = self._token()

    def _serving(self) -> bool:
        self.processes.check([self.process])
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def _token(self) -> str:
        made = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
            [*self.command, "token", "create", "bench-dev", "--role", "operator"],
            env=self.env,
            cwd=rounds.ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise RuntimeError(f"jobledger token create failed: {made.stderr.strip()}")
        return made.stdout.strip()

    def cpu_seconds(self) -> float:
        return support.cpu_seconds(support.process_tree(self.process.pid))


def completed(dev: Dev) -> int:
    """Runs the read models show completed (what the system page counts)."""
    answer = httpx.get(
        f"{dev.url}/api/v1/metrics/system",
        headers={"Authorization": f"Bearer {dev.token}"},
        timeout=10,
    )
    answer.raise_for_status()
    return int(answer.json()["counts"].get("executions", {}).get("completed", 0))


def one_round(dev: Dev, repetition: int, jobs: int) -> Round:
    target = completed(dev) + jobs
    cpu_before = dev.cpu_seconds()
    began = time.perf_counter()
    asyncio.run(send_batches(dev.url, dev.token, jobs, concurrency=4))
    accepted = time.perf_counter() - began
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while completed(dev) < target:
        dev.processes.check([dev.process])
        if time.monotonic() > deadline:
            raise RuntimeError(f"the queue was not empty within {DRAIN_TIMEOUT:g} s")
        time.sleep(POLL)
    drained = time.perf_counter() - began
    cpu = dev.cpu_seconds() - cpu_before
    support.log(f"round {repetition}: {jobs:,} runs done in {drained:.2f}s")
    return Round(
        repetition=repetition,
        jobs=jobs,
        accepted_s=round(accepted, 3),
        drained_s=round(drained, 3),
        runs_per_s=round(support.rate(jobs, drained)),
        cpu_ms_per_run=round(cpu * 1000 / jobs, 3),
    )


@contextlib.contextmanager
def running_dev(slots: int) -> Iterator[Dev]:
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-dev-") as name:
        folder = Path(name)
        processes = rounds.Processes(folder)
        try:
            yield Dev(folder / "data", processes, slots)
        finally:
            processes.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="runs per round")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    parser.add_argument("--slots", type=int, default=32, help="worker slots (default 32)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        parser.error("--jobs and --repeat must be 1 or more")
    with running_dev(args.slots) as dev:
        rows = [one_round(dev, n + 1, args.jobs) for n in range(args.repeat)]
    print()
    print(
        f"jobledger dev: {args.jobs:,} no-op runs a round through the batch route; "
        f"{args.slots} worker slots; SQLite and the in-memory queue"
    )
    print(support.format_table(rows, COLUMNS))
    rates = [r.runs_per_s for r in rows]
    low, high = min(rates), max(rates)
    print(f"runs/s median {statistics.median(rates):,.0f} (min {low:,.0f}, max {high:,.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
