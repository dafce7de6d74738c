"""What the rounds of throughput.py share, whichever system they measure: the rows of
its tables, the processes a round starts, CPU time from ``/proc`` and watching a drain.

``throughput.py`` runs jobledger, Celery and Dramatiq itself and the PostgreSQL queues
through ``_pg_peers.py``; both build their rows and CPU samples here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench import _starts as starts
from bench import _support as support

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

# The repository: the workers import the task modules from the bench package in it.
ROOT = Path(__file__).resolve().parent.parent
WORKER_COUNTS = (1, 2)
PROGRESS_EVERY = 2.0  # seconds between progress lines
STALL = 60.0  # seconds without progress that end a phase with an error


@dataclass(frozen=True)
class Sizes:
    jobs: int
    slots: int


@dataclass(frozen=True)
class Row:
    system: str
    config: str  # the peer's configuration ("" for jobledger and the Redis queues)
    repetition: int
    workers: int
    jobs: int
    accepted_s: float  # from the first enqueue request until every one was answered
    accepted_per_s: float
    leasable_s: float  # from the first enqueue request until all N are ready for a worker
    leasable_per_s: float
    startup_s: float  # from starting the workers to the first handler start
    drain_s: float  # from the first handler start until every completion is durable
    drain_per_s: float
    quiet_s: float | None  # from then until every process idles; None: it did not
    note: str = ""


@dataclass(frozen=True)
class CpuRow:
    """CPU time over a window, in ms per job, by part; None: the system has no such part.

    ``drain``: from the first handler start until every completion is durable; ``round``:
    from the first enqueue request until quiet. A worker's start-up (until its first
    handler start) is in neither: a deployment's workers are started once."""

    system: str
    config: str
    repetition: int
    workers: int
    window: str  # drain or round
    seconds: float
    jobs: int
    api: float | None
    projector: float | None
    scheduler: float | None
    worker: float
    postgres: float
    redis: float
    own: float  # the sum of the columns before it: the system under test
    client: float | None  # the sender of the jobs (round only), not in ``own``
    machine_pct: float  # every process of the machine, and the kernel, % of one core
    other_pct: float  # machine_pct less every part measured: what else ran


@dataclass
class Outcome:
    rows: list[Row] = field(default_factory=list)
    cpu: list[CpuRow] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)  # system: what ran

    def add(self, other: Outcome) -> None:
        self.rows += other.rows
        self.cpu += other.cpu
        self.checks += other.checks
        self.versions |= other.versions


def versions(python: str, modules: Sequence[str]) -> str:
    """``pgqueuer 1.6.0, asyncpg 0.32.0 on Python 3.11.7``: the distributions of
    ``modules`` installed for the interpreter ``python``."""
    code = (
        "import importlib.metadata as m, platform, sys;"
        " print(', '.join(f'{n} {m.version(n)}' for n in sys.argv[1:]),"
        " 'on Python', platform.python_version())"
    )
    result = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
        [python, "-c", code, *modules], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or f"? ({python})"


def label(system: str, workers: int) -> str:
    """``jobledger, 2 workers``: how progress lines and checks name a round."""
    return f"{system}, {workers} worker{'s' * (workers > 1)}"


# ---- processes -------------------------------------------------------------------------


class Processes:
    """Subprocesses, each in a session of its own (Ctrl-C reaches only this script, which
    then stops them), with stdout and stderr in a log file per process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._running: dict[int, tuple[str, subprocess.Popen[bytes]]] = {}
        self._names: dict[int, str] = {}  # also of stopped processes, for their logs

    def start(
        self, name: str, args: Sequence[str], env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("ab") as output:
            process = subprocess.Popen(  # noqa: S603 (fixed argument lists, no shell)
                args,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=ROOT,
                start_new_session=True,
            )
        self._running[process.pid] = (name, process)
        self._names[process.pid] = name
        return process

    def log_path(self, process: subprocess.Popen[bytes]) -> Path:
        return self.folder / f"{self._names[process.pid]}.log"

    def check(self, processes: Sequence[subprocess.Popen[bytes]]) -> None:
        """Raise if one of ``processes`` has exited, with the end of its log."""
        for process in processes:
            if process.poll() is not None:
                name = self._names[process.pid]
                raise RuntimeError(
                    f"{name} exited with {process.returncode}; the end of its log:\n"
                    + support.tail(self.log_path(process))
                )

    def run(self, name: str, args: Sequence[str], env: Mapping[str, str]) -> None:
        """Start a process and wait for it; raise, with the end of its log, if it fails.
        Started as the others are, so that Ctrl-C here stops it too."""
        process = self.start(name, args, env)
        try:
            process.wait()
        finally:
            self.stop(process)
        if process.returncode != 0:
            raise RuntimeError(
                f"{name} exited with {process.returncode}; the end of its log:\n"
                + support.tail(self.log_path(process))
            )

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        support.stop_group(process)
        self._running.pop(process.pid, None)

    def close(self) -> None:
        for _, process in reversed(list(self._running.values())):
            support.stop_group(process)
        self._running.clear()


@contextlib.contextmanager
def work_folder() -> Iterator[Path]:
    """A temporary folder for the processes' logs."""
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-throughput-") as name:
        yield Path(name)


def subprocess_env(**variables: str) -> dict[str, str]:
    """This environment without JOBLEDGER_* variables, the repository on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["JOBLEDGER_TEST_HANDLERS"] = "true"  # jobledger's runs use test.echo
    env.update(variables)
    return env


# ---- CPU use ---------------------------------------------------------------------------

# Each group names the processes whose CPU time it adds up, looked up at every sample
# (a Dramatiq worker forks its children after it starts).
Groups = dict[str, "Callable[[], list[int]]"]
# The system's own processes; with the two servers, the parts the per-job figure adds.
ROLES = ("api", "projector", "scheduler", "worker")
OWN_PARTS = (*ROLES, "postgres", "redis")


@dataclass(frozen=True)
class CpuSample:
    at: float  # Unix time
    seconds: dict[str, dict[int, float]]  # group: pid: CPU seconds so far
    machine: float  # busy CPU seconds of the whole machine

    def total(self, group: str) -> float:
        return sum(self.seconds.get(group, {}).values())


def cpu_sample(groups: Groups) -> CpuSample:
    seconds = {
        name: {pid: support.cpu_seconds([pid]) for pid in pids()} for name, pids in groups.items()
    }
    return CpuSample(time.time(), seconds, support.machine_cpu_seconds())


def tree_of(processes: Sequence[subprocess.Popen[bytes]]) -> Callable[[], list[int]]:
    return lambda: [pid for p in processes for pid in support.process_tree(p.pid)]


def base_groups(database: str, redis_pid: int) -> Groups:
    """PostgreSQL's own processes (WAL writer, checkpointer...) and the sessions of the
    benchmark's database, not those of other databases; redis-server; this process."""

    def ours(title: str) -> bool:
        return f" {database} " in title or "(" not in title  # a session shows its client

    return {
        "postgres": lambda: support.pids_named("postgres", title=ours),
        "redis": lambda: [redis_pid],
        "bench": lambda: [os.getpid()],
    }


# ---- watching a drain ------------------------------------------------------------------

DRAIN_POLL = 0.05  # seconds between completion counts near the end: its precision
COARSE_POLL = 0.25  # seconds between them while the end is further than NEAR_END
NEAR_END = 1.0  # seconds, at the drain rate so far
QUIET_WINDOW = 0.5  # seconds
# Quiet: the system's processes and redis-server used at most this much of a core over
# QUIET_WINDOW more than they use when idle (jobledger's roles tick at idle; the peers'
# workers hardly do); 2 % of 0.5 s is one tick of the kernel's 10 ms CPU clock.
QUIET_PCT = 2.0
IDLE_WINDOW = 4.0  # seconds over which an idle floor is measured
QUIET_TIMEOUT = 30.0


@dataclass(frozen=True)
class Enqueued:
    """How the enqueue of a round went."""

    begun: CpuSample  # taken just before the first enqueue request
    accepted_s: float
    leasable_s: float
    client_cpu_s: float  # the sender's CPU time: this process, or the library's
    client_is_bench: bool = False  # the sender is this process (in its "bench" group)


@dataclass(frozen=True)
class Drained:
    """What watching a drain saw."""

    spawned: float  # Unix time the workers were started
    first: starts.First  # the first handler start, and each worker's start-up CPU
    at_first: CpuSample  # as the first start was seen
    at_last: CpuSample  # as the last completion was seen durable
    quiet: CpuSample  # at the end of the first quiet window (or of the timeout)
    was_quiet: bool


def watch_drain(
    label: str,
    jobs: int,
    *,
    count: Callable[[], int],
    watch: Sequence[subprocess.Popen[bytes]],
    processes: Processes,
    groups: Groups,
    starts_folder: Path,
    spawned: float,
    idle_pct: float = 0.0,
    on_first: Callable[[], None] = lambda: None,
) -> Drained:
    """Poll ``count`` (durable completions so far) until it reaches ``jobs``, sampling
    the CPU as the first handler start shows and as the last completion does; then wait
    for quiet (``idle_pct``: what the system's processes use, % of a core, when idle)."""
    began = last_change = shown = time.perf_counter()
    first: starts.First | None = None
    at_first: CpuSample | None = None
    done = 0
    while True:
        time.sleep(poll_interval(jobs, done, first))
        processes.check(watch)
        if first is None:
            first = starts.first(starts_folder)
            if first is not None:
                at_first = cpu_sample(groups)
                on_first()
        now_done = count() if first is not None else 0
        now = time.perf_counter()
        if now_done >= jobs and first is not None and at_first is not None:
            at_last = cpu_sample(groups)
            support.log(f"{label}: {now_done:,}/{jobs:,} completed, {now - began:.1f}s")
            # The start-up CPU of every worker process, now that all have started.
            first = starts.first(starts_folder) or first
            quiet, was_quiet = wait_for_quiet(groups, idle_pct)
            if not was_quiet:
                support.log(f"{label}: not quiet within {QUIET_TIMEOUT:g}s")
            return Drained(spawned, first, at_first, at_last, quiet, was_quiet)
        if now_done != done:
            done, last_change = now_done, now
        elif now - last_change > STALL:
            logs = "".join(
                f"\n-- the end of the log of {processes.log_path(p).stem}:\n"
                + support.tail(processes.log_path(p), 10)
                for p in watch
            )
            raise RuntimeError(
                f"{label}: stuck at {done:,}/{jobs:,} completed for {STALL:g}s" + logs
            )
        if now - shown >= PROGRESS_EVERY:
            shown = now
            support.log(f"{label}: {done:,}/{jobs:,} completed, {now - began:.1f}s")


def poll_interval(jobs: int, done: int, first: starts.First | None) -> float:
    """Fine until the first start and near the end, coarse between: each count is a
    query the system's database answers, and its CPU is in the figures."""
    if first is None or not done:
        return DRAIN_POLL
    rate = done / max(time.time() - first.at, 1e-3)
    return COARSE_POLL if jobs - done > rate * NEAR_END else DRAIN_POLL


def quiet_parts(groups: Groups) -> list[str]:
    return [name for name in (*ROLES, "redis") if name in groups]


def idle_floor(groups: Groups) -> dict[str, float]:
    """What each of the system's processes and redis-server use over IDLE_WINDOW, % of
    a core, with nothing to do."""
    before = cpu_sample(groups)
    time.sleep(IDLE_WINDOW)
    after = cpu_sample(groups)
    wall = after.at - before.at
    return {
        name: round(100 * (after.total(name) - before.total(name)) / wall, 2)
        for name in quiet_parts(groups)
    }


def wait_for_quiet(groups: Groups, idle_pct: float) -> tuple[CpuSample, bool]:
    """Sample every QUIET_WINDOW until the system's processes and redis-server idle;
    the sample at the end of that window, and whether it came before QUIET_TIMEOUT."""
    quiet = quiet_parts(groups)
    deadline = time.perf_counter() + QUIET_TIMEOUT
    before = cpu_sample(groups)
    while True:
        time.sleep(QUIET_WINDOW)
        after = cpu_sample(groups)
        used = sum(after.total(name) - before.total(name) for name in quiet)
        if 100 * used / (after.at - before.at) <= idle_pct + QUIET_PCT:
            return after, True
        if time.perf_counter() > deadline:
            return after, False
        before = after


def used(start: CpuSample, end: CpuSample, group: str, boot: Mapping[int, float]) -> float:
    """CPU seconds of a group's processes between two samples. A process started since
    ``start`` counts from its first handler start (``boot``: its CPU by then) when it
    wrote one, else from its start."""
    total = 0.0
    for pid, seconds in end.seconds.get(group, {}).items():
        total += seconds - start.seconds.get(group, {}).get(pid, boot.get(pid, 0.0))
    return max(total, 0.0)


@dataclass(frozen=True)
class RoundOf:
    """Which round a row is of."""

    system: str
    config: str
    repetition: int
    workers: int
    jobs: int


def round_rows(
    of: RoundOf, enqueued: Enqueued, drained: Drained, note: str
) -> tuple[Row, list[CpuRow]]:
    """The row of a round, and its CPU over the drain and over the whole round."""
    jobs = of.jobs
    drain_s = drained.at_last.at - drained.first.at
    row = Row(
        of.system,
        of.config,
        of.repetition,
        of.workers,
        jobs,
        round(enqueued.accepted_s, 3),
        support.rate(jobs, enqueued.accepted_s),
        round(enqueued.leasable_s, 3),
        support.rate(jobs, enqueued.leasable_s),
        round(drained.first.at - drained.spawned, 3),
        round(drain_s, 3),
        support.rate(jobs, drain_s),
        round(drained.quiet.at - drained.at_last.at, 2) if drained.was_quiet else None,
        note,
    )
    windows = (
        ("drain", drained.at_first, drained.at_last, drained.first.at, None),
        ("round", enqueued.begun, drained.quiet, enqueued.begun.at, enqueued.client_cpu_s),
    )
    # A worker counts from its first handler start; one that wrote none (a Dramatiq
    # parent) from the moment the first start was seen.
    at_first = drained.at_first.seconds.get("worker", {})
    boot = dict(at_first) | drained.first.boot_cpu
    extra = 0.0 if enqueued.client_is_bench else enqueued.client_cpu_s
    cpu = [
        cpu_row(of, window, (start, end, begun), boot, (client, extra if client else 0.0))
        for window, start, end, begun, client in windows
    ]
    return row, cpu


def cpu_row(
    of: RoundOf,
    window: str,
    span: tuple[CpuSample, CpuSample, float],
    boot: Mapping[int, float],
    clients: tuple[float | None, float],
) -> CpuRow:
    """``clients``: the sender's CPU to show, and how much of it no group measured."""
    start, end, begun = span
    client, unmeasured = clients
    seconds = end.at - begun
    jobs = of.jobs
    parts = {name: used(start, end, name, boot) for name in end.seconds}

    def per_job(name: str) -> float | None:
        return round(1000 * parts[name] / jobs, 3) if name in parts else None

    own = sum(parts.get(name, 0.0) for name in OWN_PARTS)
    measured = sum(parts.values()) + unmeasured
    machine = end.machine - start.machine
    return CpuRow(
        of.system,
        of.config,
        of.repetition,
        of.workers,
        window,
        round(seconds, 2),
        jobs,
        per_job("api"),
        per_job("projector"),
        per_job("scheduler"),
        per_job("worker") or 0.0,
        per_job("postgres") or 0.0,
        per_job("redis") or 0.0,
        round(1000 * own / jobs, 3),
        None if client is None else round(1000 * client / jobs, 3),
        round(100 * machine / seconds, 1) if seconds > 0 else 0.0,
        round(100 * max(0.0, machine - measured) / seconds, 1) if seconds > 0 else 0.0,
    )
