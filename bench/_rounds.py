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

from bench import _support as support

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

# The repository: the workers import the task modules from the bench package in it.
ROOT = Path(__file__).resolve().parent.parent
WORKER_COUNTS = (1, 2)
POLL = 0.5  # seconds between completion counts
PROGRESS_EVERY = 2.0  # seconds between progress lines
STALL = 60.0  # seconds without progress that end a phase with an error


@dataclass(frozen=True)
class Sizes:
    jobs: int
    slots: int


@dataclass(frozen=True)
class Row:
    system: str
    workers: int
    jobs: int
    enqueue_s: float
    enqueue_per_s: float
    in_queue_s: float  # from the first enqueue until all N are ready for a worker
    startup_s: float  # from starting the workers to the first completion
    drain_s: float  # from the first completion to the last
    drain_per_s: float
    note: str = ""


@dataclass(frozen=True)
class CpuRow:
    """CPU use during a drain, in % of one core (the machine has ``os.cpu_count()``)."""

    system: str
    workers: int
    seconds: float  # the sampled window: first completion seen to last completion seen
    jobs: int  # completions in that window
    worker_pct: float
    projector_pct: float | None
    postgres_pct: float
    redis_pct: float
    bench_pct: float
    machine_pct: float  # every process of the machine, and the kernel
    other_pct: float  # machine_pct less the columns before it: what else ran
    # CPU of the system's own parts (workers, projector, PostgreSQL, Redis) per job
    ms_per_job: float | None


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
# The parts that are the system under test, whose CPU the per-job figure adds up.
OWN_PARTS = ("worker", "projector", "postgres", "redis")


@dataclass(frozen=True)
class CpuSample:
    at: float
    seconds: dict[str, float]


def cpu_sample(groups: Groups) -> CpuSample:
    seconds = {name: support.cpu_seconds(pids()) for name, pids in groups.items()}
    seconds["machine"] = support.machine_cpu_seconds()
    return CpuSample(time.perf_counter(), seconds)


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


@dataclass(frozen=True)
class Watched:
    started: float  # Unix time the workers were started
    first: CpuSample | None  # at the first poll that saw a completion
    last: CpuSample | None  # at the poll that saw the last one
    first_done: int = 0  # completions that first poll saw
    last_done: int = 0

    def cpu_row(self, system: str, workers: int) -> CpuRow | None:
        """The CPU each part used between the two samples, or None without them."""
        if self.first is None or self.last is None:
            return None
        first, last = self.first, self.last
        wall = last.at - first.at

        def seconds(name: str) -> float | None:
            if name not in first.seconds:
                return None
            return last.seconds[name] - first.seconds[name]

        def pct(name: str) -> float | None:
            used = seconds(name)
            return None if used is None or wall <= 0 else round(100 * used / wall, 1)

        parts = {name: pct(name) for name in ("worker", "projector", "postgres", "redis", "bench")}
        machine = pct("machine") or 0.0
        jobs = self.last_done - self.first_done
        own = sum(seconds(name) or 0.0 for name in OWN_PARTS)
        return CpuRow(
            system,
            workers,
            round(wall, 2),
            jobs,
            parts["worker"] or 0.0,
            parts["projector"],
            parts["postgres"] or 0.0,
            parts["redis"] or 0.0,
            parts["bench"] or 0.0,
            machine,
            round(max(0.0, machine - sum(v or 0.0 for v in parts.values())), 1),
            round(1000 * own / jobs, 3) if jobs > 0 else None,
        )


def watch_drain(
    label: str,
    jobs: int,
    *,
    count: Callable[[], int],
    watch: Sequence[subprocess.Popen[bytes]],
    processes: Processes,
    groups: Groups,
    on_first: Callable[[], None] = lambda: None,
) -> Watched:
    """Poll ``count`` (completions so far) until it reaches ``jobs``; sample the CPU when
    the first completion shows and when the last does."""
    started_wall = time.time()
    started = last_change = shown = time.perf_counter()
    first: CpuSample | None = None
    first_done = done = 0
    while True:
        time.sleep(POLL)
        processes.check(watch)
        now_done = count()
        now = time.perf_counter()
        if now_done and first is None:
            first, first_done = cpu_sample(groups), now_done
            on_first()
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
        if done >= jobs:
            last = cpu_sample(groups)
            support.log(f"{label}: {done:,}/{jobs:,} completed, {now - started:.1f}s")
            return Watched(started_wall, first, last, first_done, done)
        if now - shown >= PROGRESS_EVERY:
            shown = now
            support.log(f"{label}: {done:,}/{jobs:,} completed, {now - started:.1f}s")
