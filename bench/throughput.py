"""Throughput: enqueue N no-op jobs, then drain them with 1 and with 2 worker processes.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops every process it started and the server, and
drops the database at the end, also on an error or Ctrl-C.

    python -m bench.throughput [--quick] [--jobs N] [--slots S] [--systems NAME ...]
        [--profile] [--admin-url URL]

jobledger: a ``jobledger projector`` process follows the log into the Redis queue for
the whole run. Enqueue: this process saves N ad-hoc ``test.echo`` executions (what
``Executions.run`` saves) through the group-commit writer, with up to 2,000 saves in
flight; timed until every save has committed, and until all N are ready in Redis.
Drain: ``jobledger worker`` processes with S slots each, timed from the first to the
last ``ExecutionCompleted`` in the log; the log is checked afterwards (N completions,
no execution left open). Then the same with 2 workers on N new executions.

Celery and Dramatiq, when importable: the same rounds with N no-op tasks on the same
redis-server (a database number each), sent from this process by 8 threads and drained
by 1 and 2 worker processes of S threads each; every task counts itself in Redis.

A second table gives the CPU time of each part during the drains (``/proc``), and what
other programs took meanwhile; a third puts the systems' rates side by side. With
``--profile``, py-spy (on PATH) samples every jobledger worker during its drain while one
of its threads holds the GIL, and the functions with the most samples are printed.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString, cast

import psycopg
import redis
from eventsourcing.persistence import StoredEvent
from psycopg import sql

import jobledger
from bench import _completions as completions
from bench import _support as support
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.runtime.bootstrap import Container, bootstrap
from jobledger.runtime.logging import configure_logging
from jobledger.runtime.settings import load_settings
from jobledger.runtime.store import events_table, migrate

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from concurrent.futures import Future
    from types import ModuleType

QUEUE = "default"
SPEC = ExecutionSpec(handler="test.echo", queue=QUEUE)
PREFIX = "bench-tp"  # jobledger's Redis key prefix
SYSTEMS = ("jobledger", "celery", "dramatiq")
REDIS_DB = {"jobledger": 0, "celery": 1, "dramatiq": 2}
TASK_MODULES = {"celery": "bench._celery_tasks", "dramatiq": "bench._dramatiq_tasks"}
# The repository: the workers import the task modules from the bench package in it.
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JOBS = 20_000
QUICK_JOBS = 1_000
DEFAULT_SLOTS = 32
WORKER_COUNTS = (1, 2)
ENQUEUE_WINDOW = 2_000  # jobledger saves in flight at once
SEND_THREADS = 8  # Celery and Dramatiq: each send waits for its own Redis round trip
POLL = 0.5  # seconds between completion counts
QUEUE_POLL = 0.05  # seconds between queue depth reads while enqueuing
PROGRESS_EVERY = 2.0  # seconds between progress lines
STALL = 60.0  # seconds without progress that end a phase with an error
READY_TIMEOUT = 60.0
SETTLE_TIMEOUT = 30.0  # for the Redis queue to empty once every job completed
BUSY_ELSEWHERE_PCT = 25.0  # other programs' CPU during a drain that makes it suspect
PROFILE_TOP = 30
PROFILE_RATE = 100  # py-spy samples per second

COMPLETED = Execution.Completed.TOPIC
ENQUEUED = Execution.Enqueued.TOPIC
LEASED = Execution.Leased.TOPIC


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
    worker_pct: float
    projector_pct: float | None
    postgres_pct: float
    redis_pct: float
    bench_pct: float
    machine_pct: float  # every process of the machine, and the kernel
    other_pct: float  # machine_pct less the columns before it: what else ran


@dataclass(frozen=True)
class Ratio:
    measure: str
    jobledger: float | None
    celery: float | None
    dramatiq: float | None
    vs_celery: float | None
    vs_dramatiq: float | None


@dataclass
class Outcome:
    rows: list[Row] = field(default_factory=list)
    cpu: list[CpuRow] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    profile: Profile | None = None
    raw_profiles: list[str] = field(default_factory=list)


def with_db(redis_url: str, db: int) -> str:
    return f"{redis_url.rpartition('/')[0]}/{db}"


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


@dataclass(frozen=True)
class CpuSample:
    at: float
    seconds: dict[str, float]


def cpu_sample(groups: Groups) -> CpuSample:
    seconds = {name: support.cpu_seconds(pids()) for name, pids in groups.items()}
    seconds["machine"] = support.machine_cpu_seconds()
    return CpuSample(time.perf_counter(), seconds)


def cpu_row(system: str, workers: int, first: CpuSample, last: CpuSample) -> CpuRow:
    wall = last.at - first.at

    def pct(name: str) -> float | None:
        if name not in first.seconds or wall <= 0:
            return None
        return round(100 * (last.seconds[name] - first.seconds[name]) / wall, 1)

    parts = {name: pct(name) for name in ("worker", "projector", "postgres", "redis", "bench")}
    machine = pct("machine") or 0.0
    return CpuRow(
        system,
        workers,
        round(wall, 2),
        parts["worker"] or 0.0,
        parts["projector"],
        parts["postgres"] or 0.0,
        parts["redis"] or 0.0,
        parts["bench"] or 0.0,
        machine,
        round(max(0.0, machine - sum(v or 0.0 for v in parts.values())), 1),
    )


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
    first: CpuSample | None
    last: CpuSample | None


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
    done = 0
    while True:
        time.sleep(POLL)
        processes.check(watch)
        now_done = count()
        now = time.perf_counter()
        if now_done and first is None:
            first = cpu_sample(groups)
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
            return Watched(started_wall, first, last)
        if now - shown >= PROGRESS_EVERY:
            shown = now
            support.log(f"{label}: {done:,}/{jobs:,} completed, {now - started:.1f}s")


# ---- jobledger -------------------------------------------------------------------------


class Saver:
    """Saves ``jobs`` new ad-hoc executions through the writer from a thread of its own,
    at most ENQUEUE_WINDOW uncommitted at once; notes when the last one committed."""

    def __init__(self, container: Container, jobs: int, tag: str) -> None:
        self._container = container
        self._jobs = jobs
        self._tag = tag
        self._window = threading.BoundedSemaphore(ENQUEUE_WINDOW)
        self._lock = threading.Lock()
        self.saved = 0
        self.finished_at: float | None = None
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="bench-saver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        writer, limits = self._container.writer, self._container.ledger.limits
        try:
            for index in range(self._jobs):
                self._window.acquire()
                if self.errors:
                    return
                # As Executions.run builds it; the save goes to the writer instead.
                SPEC.check(limits)
                execution = Execution.enqueue(
                    spec=SPEC,
                    ready_at=datetime.now(UTC),
                    trigger=Trigger.ADHOC,
                    trigger_key=f"{self._tag}-{index}",
                )
                writer.submit(execution).add_done_callback(self._saved)
        except BaseException as error:  # noqa: BLE001 (re-raised by the main thread)
            self.errors.append(error)

    def _saved(self, future: Future[None]) -> None:
        self._window.release()
        error = future.exception()
        with self._lock:
            if error is not None:
                self.errors.append(error)
            self.saved += 1
            if self.saved == self._jobs:
                self.finished_at = time.perf_counter()


def enqueue_jobledger(container: Container, jobs: int, label: str) -> tuple[float, float]:
    """Save ``jobs`` executions; (seconds until all committed, until all ready in Redis)."""
    saver = Saver(container, jobs, f"bench-{uuid.uuid4().hex[:12]}")
    begun = last_change = shown = time.perf_counter()
    saver.start()
    seen = (0, 0)
    in_queue: float | None = None
    while in_queue is None or saver.finished_at is None:
        time.sleep(QUEUE_POLL)
        if saver.errors:
            raise saver.errors[0]
        ready = container.queue.depths(QUEUE, now=datetime.now(UTC)).ready
        now = time.perf_counter()
        if ready >= jobs and in_queue is None:
            in_queue = now - begun
        if (ready, saver.saved) != seen:
            seen, last_change = (ready, saver.saved), now
        elif now - last_change > STALL:
            raise RuntimeError(f"{label}: stuck at {ready:,}/{jobs:,} in the queue")
        if now - shown >= PROGRESS_EVERY:
            shown = now
            support.log(
                f"{label}: {saver.saved:,}/{jobs:,} committed, {ready:,} in the queue,"
                f" {now - begun:.1f}s"
            )
    saver.join()
    committed = saver.finished_at - begun
    support.log(
        f"{label}: {jobs:,} committed in {committed:.2f}s ({jobs / committed:,.0f}/s),"
        f" all in the queue after {in_queue:.2f}s"
    )
    return committed, in_queue


class LogCounter:
    """Counts ``ExecutionCompleted`` events in the log, reading only rows added since the
    last count (notification ids commit in order: the recorder locks the table)."""

    def __init__(self, url: str, table: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._table = sql.Identifier(table)
        self.position = self._one("SELECT coalesce(max(notification_id), 0) FROM {}")[0]
        self.completed = 0

    def _one(self, query: LiteralString, params: Sequence[object] = ()) -> tuple[int, ...]:
        statement = sql.SQL(query).format(self._table)
        row = self._conn.execute(statement, params).fetchone()
        if row is None:
            raise RuntimeError(f"no row from {query!r}")
        return tuple(int(value or 0) for value in row)

    def count(self) -> int:
        completed, head = self._one(
            "SELECT count(*) FILTER (WHERE topic = %s), coalesce(max(notification_id), 0)"
            " FROM {} WHERE notification_id > %s",
            (COMPLETED, self.position),
        )
        if head:
            self.completed += completed
            self.position = head
        return self.completed

    def completion_span(self, container: Container, after: int) -> tuple[float, float, int]:
        """(first, last) completion as Unix times, from the events' own timestamps (taken
        by the worker as the handler returned), and how many completions there are."""
        statement = sql.SQL(
            "SELECT originator_id, originator_version, topic, state FROM {}"
            " WHERE topic = %s AND notification_id > %s"
        ).format(self._table)
        rows = self._conn.execute(statement, (COMPLETED, after)).fetchall()
        mapper = container.ledger.mapper
        times = [
            cast("Execution.Completed", mapper.to_domain_event(StoredEvent(*row))).timestamp
            for row in rows
        ]
        if not times:
            raise RuntimeError("no ExecutionCompleted event in the log")
        return min(times).timestamp(), max(times).timestamp(), len(times)

    def audit(self) -> dict[str, int]:
        """Counts over the whole log: what the executions went through."""
        enqueued, completed, distinct, leased, other = self._one(
            "SELECT count(*) FILTER (WHERE topic = %s), count(*) FILTER (WHERE topic = %s),"
            " count(DISTINCT originator_id) FILTER (WHERE topic = %s),"
            " count(*) FILTER (WHERE topic = %s), count(*) FILTER (WHERE topic <> ALL(%s))"
            " FROM {}",
            (ENQUEUED, COMPLETED, COMPLETED, LEASED, [ENQUEUED, COMPLETED, LEASED]),
        )
        return {
            "enqueued": enqueued,
            "completed": completed,
            "completed_executions": distinct,
            "open": enqueued - distinct,
            "leased": leased,
            "other_events": other,
        }

    def listening(self) -> bool:
        """Whether a session of this database LISTENs (the projector's wake-ups)."""
        row = self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
        ).fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        self._conn.close()


def worker_stats(log_path: Path) -> dict[str, object]:
    """The counters of a jobledger worker's ``worker.stopped`` line (JSON logs)."""
    for line in reversed(log_path.read_text(encoding="utf-8", errors="replace").splitlines()):
        if line.startswith("{") and '"worker.stopped"' in line:
            entry: dict[str, object] = json.loads(line)
            return entry
    return {}


@dataclass(frozen=True)
class Sampling:
    """One py-spy recording of the workers of a round."""

    label: str
    processes: int
    seconds: float
    samples: int  # samples in which a thread of a worker held the GIL
    gil_pct: float  # of the time, per process: how CPU-bound the workers were


@dataclass
class Profile:
    """Shares of the GIL-holding samples of every recording."""

    recordings: list[Sampling] = field(default_factory=list)
    threads: list[tuple[str, float]] = field(default_factory=list)
    own: list[tuple[str, float]] = field(default_factory=list)  # the sampled function
    inclusive: list[tuple[str, float]] = field(default_factory=list)  # jobledger's, on stack


class Spy:
    """py-spy sampling the workers of a round while a thread holds the GIL, that is,
    where their Python code spends CPU (waits on PostgreSQL or Redis do not show)."""

    def __init__(self, binary: str, folder: Path) -> None:
        self._binary = binary
        self._folder = folder
        self._running: list[tuple[subprocess.Popen[bytes], Path]] = []
        self._label = ""
        self._begun = 0.0
        self.outputs: list[Path] = []
        self.recordings: list[Sampling] = []

    def attach(self, pids: Sequence[int], label: str) -> None:
        self._label, self._begun = label, time.perf_counter()
        for pid in pids:
            path = self._folder / f"py-spy-{label}-{pid}.txt"
            args = [self._binary, "record", "--pid", str(pid), "--rate", str(PROFILE_RATE)]
            args += ["--gil", "--threads", "--format", "raw", "--output", str(path)]
            process = subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            self._running.append((process, path))

    def stop(self) -> None:
        if not self._running:
            return
        seconds = time.perf_counter() - self._begun
        paths = []
        for process, path in self._running:
            process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if path.exists():
                paths.append(path)
        samples = sum(weight for _, weight in stacks(paths))
        possible = PROFILE_RATE * seconds * len(self._running)
        self.recordings.append(
            Sampling(
                self._label,
                len(self._running),
                round(seconds, 2),
                samples,
                round(100 * samples / possible, 1) if possible else 0.0,
            )
        )
        self.outputs += paths
        self._running.clear()

    def profile(self, count: int) -> Profile:
        threads: collections.Counter[str] = collections.Counter()
        own: collections.Counter[str] = collections.Counter()
        inclusive: collections.Counter[str] = collections.Counter()
        total = 0
        for frames, weight in stacks(self.outputs):
            total += weight
            thread, *calls = frames
            threads[thread_group(thread)] += weight
            if calls:
                own[short_frame(calls[-1])] += weight
            for name in {short_frame(call) for call in calls}:
                if name.startswith("jobledger/"):
                    inclusive[name] += weight

        def shares(counter: collections.Counter[str]) -> list[tuple[str, float]]:
            return [(name, round(100 * n / total, 1)) for name, n in counter.most_common(count)]

        if not total:
            return Profile(self.recordings)
        return Profile(self.recordings, shares(threads), shares(own), shares(inclusive))

    def keep(self, stem: str) -> list[Path]:
        """Copy the raw stacks (collapsed format, for a flame graph) to the results."""
        kept = []
        support.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        for path in self.outputs:
            target = support.RESULTS_DIR / f"{stem}-{path.name}"
            shutil.copyfile(path, target)
            kept.append(target)
        return kept


def stacks(paths: Sequence[Path]) -> Iterator[tuple[list[str], int]]:
    """(frames, samples) per line of py-spy's raw output; the thread is the first frame."""
    for path in paths:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            stack, _, number = line.rpartition(" ")
            if stack and number.isdigit():
                yield stack.split(";"), int(number)


def thread_group(frame: str) -> str:
    """``thread (123): asyncio_4`` as ``asyncio_*``: the executor's threads as one."""
    name = frame.partition(": ")[2] or frame
    return name.rstrip("0123456789") + "*" if name[-1:].isdigit() else name


def short_frame(frame: str) -> str:
    """``function (path/file.py:line)`` as ``path/file.py:function``."""
    name, _, where = frame.partition(" (")
    return f"{where.rstrip(')').rpartition(':')[0]}:{name}"


class JobledgerRun:
    """The jobledger rounds: a projector process for the whole run, this process saving,
    and worker processes draining, each round on new executions."""

    def __init__(
        self, url: str, redis_url: str, size: Sizes, processes: Processes, spy: Spy | None
    ) -> None:
        self.size = size
        self.processes = processes
        self.spy = spy
        jl_redis = with_db(redis_url, REDIS_DB["jobledger"])
        self.settings = load_settings(
            {},
            test_handlers="true",
            database_url=url,
            redis_url=jl_redis,
            redis_prefix=PREFIX,
            log_level="warning",
        )
        self.env = subprocess_env(
            JOBLEDGER_DATABASE_URL=url,
            JOBLEDGER_REDIS_URL=jl_redis,
            JOBLEDGER_REDIS_PREFIX=PREFIX,
            JOBLEDGER_WORKER_SLOTS=str(size.slots),
            JOBLEDGER_WORKER_QUEUES=QUEUE,
            JOBLEDGER_LOG_FORMAT="json",
        )
        self.command = [sys.executable, "-m", "jobledger.cli"]

    def run(self, base: Groups) -> Outcome:
        migrate(self.settings, progress=support.log)
        configure_logging(self.settings)
        projector = self.processes.start(
            "jobledger-projector", [*self.command, "projector"], self.env
        )
        outcome = Outcome()
        with bootstrap(self.settings) as container:
            counter = LogCounter(self.settings.database_url, events_table(self.settings))
            try:
                self._wait_for_projector(container, counter, projector)
                groups = base | {"projector": lambda: [projector.pid]}
                for number, workers in enumerate(WORKER_COUNTS, start=1):
                    row, cpu = self._round(
                        container,
                        counter,
                        number=number,
                        workers=workers,
                        projector=projector,
                        groups=groups,
                    )
                    outcome.rows.append(row)
                    outcome.checks.append(f"{row.system}, {workers} workers: {row.note}")
                    if cpu is not None:
                        outcome.cpu.append(cpu)
            finally:
                counter.close()
        self.processes.stop(projector)
        return outcome

    def _wait_for_projector(
        self, container: Container, counter: LogCounter, projector: subprocess.Popen[bytes]
    ) -> None:
        """Until the projector has built the (empty) queue and LISTENs to the log."""

        def ready() -> bool:
            self.processes.check([projector])
            return container.queue.read_meta() is not None and counter.listening()

        support.wait_for(ready, READY_TIMEOUT, "the projector's start", poll=0.1)
        support.log("jobledger: the projector follows the log")

    def _round(
        self,
        container: Container,
        counter: LogCounter,
        *,
        number: int,
        workers: int,
        projector: subprocess.Popen[bytes],
        groups: Groups,
    ) -> tuple[Row, CpuRow | None]:
        jobs = self.size.jobs
        label = f"jobledger, {workers} worker{'s' * (workers > 1)}"
        enqueue_s, in_queue_s = enqueue_jobledger(container, jobs, label)
        before = counter.count()
        start_position = counter.position
        spawned = [
            self.processes.start(
                f"jobledger-worker-r{number}-{k}", [*self.command, "worker"], self.env
            )
            for k in range(workers)
        ]
        spy = self.spy

        def attach() -> None:
            if spy is not None:
                spy.attach([p.pid for p in spawned], f"r{number}")

        watched = watch_drain(
            label,
            jobs,
            count=lambda: counter.count() - before,
            watch=[*spawned, projector],
            processes=self.processes,
            groups=groups | {"worker": tree_of(spawned)},
            on_first=attach,
        )
        if spy is not None:
            spy.stop()
        stats = []
        for process in spawned:
            self.processes.stop(process)
            stats.append(worker_stats(self.processes.log_path(process)))
        first, last, completed = counter.completion_span(container, start_position)
        note = check_round(container, counter, jobs * number, stats)
        drain_s = last - first
        row = Row(
            "jobledger",
            workers,
            jobs,
            round(enqueue_s, 3),
            support.rate(jobs, enqueue_s),
            round(in_queue_s, 3),
            round(first - watched.started, 3),
            round(drain_s, 3),
            support.rate(completed, drain_s),
            note,
        )
        cpu = None
        if watched.first is not None and watched.last is not None:
            cpu = cpu_row("jobledger", workers, watched.first, watched.last)
        return row, cpu


def check_round(
    container: Container, counter: LogCounter, expected: int, stats: Sequence[Mapping[str, object]]
) -> str:
    """Every execution so far completed exactly once, per the log; the Redis queue,
    once the projector caught up, holds none of them. Raises if not."""
    audit = counter.audit()
    problems = []
    if audit["completed"] != expected or audit["completed_executions"] != expected:
        problems.append(
            f"{audit['completed']:,} ExecutionCompleted events for"
            f" {audit['completed_executions']:,} executions, expected {expected:,}"
        )
    if audit["open"]:
        problems.append(f"{audit['open']:,} executions without ExecutionCompleted")
    if problems:
        raise RuntimeError("the log disagrees: " + "; ".join(problems))

    def settled() -> bool:
        depths = container.queue.depths(QUEUE, now=datetime.now(UTC))
        return depths.ready + depths.delayed + depths.leased + depths.dead == 0

    support.wait_for(settled, SETTLE_TIMEOUT, "an empty Redis queue", poll=0.1)
    extra = audit["leased"] - expected
    stale = sum(int(str(s.get("stale_reports", 0))) for s in stats)
    notes = [f"log: {audit['completed']:,} completed, 0 open"]
    if extra or audit["other_events"]:
        notes.append(f"{extra:,} extra leases, {audit['other_events']:,} other events")
    if stale:
        notes.append(f"{stale} stale reports")
    return "; ".join(notes)


# ---- Celery and Dramatiq ---------------------------------------------------------------


def importable(system: str) -> bool:
    try:
        importlib.import_module(system)
    except ImportError:
        return False
    return True


def load_tasks(system: str, broker_url: str) -> ModuleType:
    """The task module, imported with the broker URL it reads."""
    os.environ["BENCH_BROKER_URL"] = broker_url
    return importlib.import_module(TASK_MODULES[system])


def send_all(send: Callable[[], object], jobs: int) -> float:
    """Send ``jobs`` tasks from SEND_THREADS threads; seconds until every send returned."""
    errors: list[BaseException] = []

    def run(count: int) -> None:
        try:
            for _ in range(count):
                send()
        except BaseException as error:  # noqa: BLE001 (re-raised by the main thread)
            errors.append(error)

    shares = [jobs // SEND_THREADS + (i < jobs % SEND_THREADS) for i in range(SEND_THREADS)]
    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in shares]
    begun = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - begun


def worker_command(system: str, slots: int, name: str) -> list[str]:
    if system == "celery":
        # One process with `slots` threads: jobledger's worker is one process with
        # `slots` asyncio tasks, and both run Python on one core at a time.
        return [
            sys.executable, "-m", "celery", "-A", TASK_MODULES[system], "worker",
            "--pool", "threads", "--concurrency", str(slots), "--hostname", f"{name}@%h",
            "--queues", "bench", "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "dramatiq", TASK_MODULES[system],
        "--processes", "1", "--threads", str(slots), "--path", str(ROOT),
        "--queues", "bench",
    ]  # fmt: skip


def run_library(
    system: str, redis_url: str, base: Groups, size: Sizes, processes: Processes
) -> Outcome:
    broker_url = with_db(redis_url, REDIS_DB[system])
    tasks = load_tasks(system, broker_url)
    send: Callable[[], object] = tasks.noop.delay if system == "celery" else tasks.noop.send
    client = redis.Redis.from_url(broker_url)
    outcome = Outcome()
    try:
        client.flushdb()
        env = subprocess_env(BENCH_BROKER_URL=broker_url)
        for round_number, workers in enumerate(WORKER_COUNTS, start=1):
            label = f"{system}, {workers} worker{'s' * (workers > 1)}"
            completions.reset(client)
            support.log(f"{label}: sending {size.jobs:,} tasks from {SEND_THREADS} threads")
            enqueue_s = send_all(send, size.jobs)
            support.log(
                f"{label}: {size.jobs:,} sent in {enqueue_s:.2f}s ({size.jobs / enqueue_s:,.0f}/s)"
            )
            spawned = [
                processes.start(
                    f"{system}-worker-r{round_number}-{k}",
                    worker_command(system, size.slots, f"bench{k}"),
                    env,
                )
                for k in range(workers)
            ]
            groups = base | {"worker": tree_of(spawned)}
            watched = watch_drain(
                label,
                size.jobs,
                count=lambda: completions.count(client),
                watch=spawned,
                processes=processes,
                groups=groups,
            )
            for process in spawned:
                processes.stop(process)
            span = completions.span(client)
            done = completions.count(client)
            if span is None or done != size.jobs:
                raise RuntimeError(f"{label}: {done:,} of {size.jobs:,} tasks ran")
            first, last = span
            drain_s = last - first
            outcome.rows.append(
                Row(
                    system,
                    workers,
                    size.jobs,
                    round(enqueue_s, 3),
                    support.rate(size.jobs, enqueue_s),
                    round(enqueue_s, 3),
                    round(first - watched.started, 3),
                    round(drain_s, 3),
                    support.rate(done, drain_s),
                    f"{done:,} tasks counted",
                )
            )
            if watched.first is not None and watched.last is not None:
                outcome.cpu.append(cpu_row(system, workers, watched.first, watched.last))
    finally:
        client.close()
    return outcome


# ---- the figures -----------------------------------------------------------------------


def ratios(rows: Sequence[Row]) -> list[Ratio]:
    """Enqueue rate over all rounds, and drain rate per worker count, side by side."""
    by_measure: dict[str, dict[str, float]] = {}
    for system in SYSTEMS:
        mine = [r for r in rows if r.system == system]
        if not mine:
            continue
        jobs, seconds = sum(r.jobs for r in mine), sum(r.enqueue_s for r in mine)
        by_measure.setdefault("enqueue jobs/s", {})[system] = support.rate(jobs, seconds)
        for row in mine:
            noun = f"worker{'s' * (row.workers > 1)}"
            by_measure.setdefault(f"drain jobs/s, {row.workers} {noun}", {})[system] = (
                row.drain_per_s
            )

    def ratio(mine: float | None, theirs: float | None) -> float | None:
        return round(mine / theirs, 2) if mine and theirs else None

    result = []
    for measure, values in by_measure.items():
        jl, celery, dramatiq = (values.get(s) for s in SYSTEMS)
        result.append(Ratio(measure, jl, celery, dramatiq, ratio(jl, celery), ratio(jl, dramatiq)))
    return result


COLUMNS = (
    ("system", "{:<9}"),
    ("workers", "{:>7}"),
    ("jobs", "{:>6}"),
    ("enqueue_s", "{:>9}"),
    ("enqueue_per_s", "{:>13}"),
    ("in_queue_s", "{:>10}"),
    ("startup_s", "{:>9}"),
    ("drain_s", "{:>7}"),
    ("drain_per_s", "{:>11}"),
    ("note", "{}"),
)
CPU_COLUMNS = (
    ("system", "{:<9}"),
    ("workers", "{:>7}"),
    ("seconds", "{:>7}"),
    ("worker_pct", "{:>10}"),
    ("projector_pct", "{:>13}"),
    ("postgres_pct", "{:>12}"),
    ("redis_pct", "{:>9}"),
    ("bench_pct", "{:>9}"),
    ("machine_pct", "{:>11}"),
    ("other_pct", "{:>9}"),
)
RATIO_COLUMNS = (
    ("measure", "{:<24}"),
    ("jobledger", "{:>9}"),
    ("celery", "{:>8}"),
    ("dramatiq", "{:>8}"),
    ("vs_celery", "{:>9}"),
    ("vs_dramatiq", "{:>11}"),
)


def show(value: object) -> str:
    """As ``support.show``, but large floats without decimals and ints with separators."""
    if isinstance(value, float) and value >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return support.show(value)


def format_profile(profile: Profile) -> str:
    title = f"jobledger workers under py-spy --gil ({PROFILE_RATE} samples/s)"
    lines = [f"{title}: where their Python code spends CPU"]
    lines += [
        f"  {r.label}: {r.processes} process(es), {r.seconds:g} s, {r.samples:,} samples:"
        f" a thread held the GIL {r.gil_pct:g}% of the time"
        for r in profile.recordings
    ]
    lines.append("  threads: " + ", ".join(f"{name} {pct:g}%" for name, pct in profile.threads))
    for title, entries in (
        ("sampled in (own time)", profile.own),
        ("jobledger functions on the stack (inclusive)", profile.inclusive),
    ):
        lines.append(f"\n{'%':>6}  {title}")
        lines += [f"{pct:>6.1f}  {name}" for name, pct in entries]
    return "\n".join(lines)


# ---- entry point -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_JOBS:,} jobs per round, a smoke test"
    )
    parser.add_argument("--jobs", type=int, help=f"jobs per round (default {DEFAULT_JOBS:,})")
    parser.add_argument(
        "--slots",
        type=int,
        default=DEFAULT_SLOTS,
        help=f"slots (threads) per worker process (default {DEFAULT_SLOTS})",
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        choices=SYSTEMS,
        default=list(SYSTEMS),
        help="what to measure (default: all that are installed)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="sample the jobledger workers with py-spy"
    )
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be 1 or more")
    return args


def stem(args: argparse.Namespace, size: Sizes) -> str:
    suffix = "-quick" if args.quick else ""
    if args.jobs is not None:
        suffix += f"-jobs{size.jobs}"
    if size.slots != DEFAULT_SLOTS:
        suffix += f"-slots{size.slots}"
    if list(args.systems) != list(SYSTEMS):
        suffix += "-" + "-".join(args.systems)
    if args.profile:
        suffix += "-profile"
    return f"throughput{suffix}"


def code_version() -> str:
    """Where the jobledger under test was imported from; in a git work tree, its commit
    and whether its files differ from it."""
    folder = Path(jobledger.__file__).resolve().parent
    git = shutil.which("git")
    if git is None:
        return str(folder)
    result = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
        [git, "-C", str(folder), "log", "-1", "--format=%h"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return str(folder)
    status = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
        [git, "-C", str(folder), "status", "--porcelain", "--", "."],
        capture_output=True,
        text=True,
        check=False,
    )
    changed = " with uncommitted changes" if status.stdout.strip() else ""
    return f"{folder} at {result.stdout.strip()}{changed}"


def redis_server_pid(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def run_all(
    args: argparse.Namespace, size: Sizes, url: str, redis_url: str, spy_binary: str | None
) -> tuple[Outcome, list[str]]:
    """Every system asked for that is installed; and which ones were not."""
    base = base_groups(url.rpartition("/")[2], redis_server_pid(redis_url))
    outcome = Outcome()
    skipped = []
    with work_folder() as folder:
        processes = Processes(folder)
        try:
            for system in args.systems:
                if system != "jobledger" and not importable(system):
                    skipped.append(system)
                    continue
                if system == "jobledger":
                    spy = Spy(spy_binary, folder) if spy_binary else None
                    part = JobledgerRun(url, redis_url, size, processes, spy).run(base)
                    if spy is not None:
                        part.profile = spy.profile(PROFILE_TOP)
                        part.raw_profiles = [str(p) for p in spy.keep(stem(args, size))]
                else:
                    part = run_library(system, redis_url, base, size, processes)
                outcome.rows += part.rows
                outcome.cpu += part.cpu
                outcome.checks += part.checks
                outcome.profile = outcome.profile or part.profile
                outcome.raw_profiles += part.raw_profiles
        finally:
            processes.close()
    return outcome, skipped


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = Sizes(args.jobs or (QUICK_JOBS if args.quick else DEFAULT_JOBS), args.slots)
    spy_binary = shutil.which("py-spy") if args.profile else None
    if args.profile and spy_binary is None:
        print("--profile needs py-spy on PATH (pip install py-spy)", file=sys.stderr)
        return 2
    begun = time.perf_counter()
    before = support.load_average()
    code = code_version()
    try:
        with (
            support.throwaway_postgres(args.admin_url) as url,
            support.private_redis() as redis_url,
        ):
            store = support.versions(url, redis_url)
            support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {before}")
            support.log(f"jobledger: {code}")
            outcome, skipped = run_all(args, size, url, redis_url, spy_binary)
    except KeyboardInterrupt:
        support.log(
            "interrupted; the processes and redis-server were stopped, the database dropped"
        )
        return 130
    seconds = time.perf_counter() - begun
    print(
        f"{size.jobs:,} no-op jobs per round; {size.slots} slots per jobledger worker,"
        f" {size.slots} threads per Celery / Dramatiq worker process\n"
    )
    print(support.format_table(outcome.rows, COLUMNS, show))
    print("\nCPU during the drains, % of one core (100 = one core busy)")
    print(support.format_table(outcome.cpu, CPU_COLUMNS, show))
    for row in outcome.cpu:
        if row.other_pct >= BUSY_ELSEWHERE_PCT:
            print(
                f"warning: during the {row.system} drain with {row.workers} worker(s), other"
                f" programs or the kernel used {row.other_pct:g}% of a core: its figures may be"
                " understated"
            )
    table = ratios(outcome.rows)
    print()
    print(support.format_table(table, RATIO_COLUMNS, show))
    for system in skipped:
        print(f"\n{system} is not installed: skipped. Install it with: pip install -e '.[bench]'")
    if outcome.profile is not None:
        print()
        print(format_profile(outcome.profile))
        print("raw stacks (collapsed, for a flame graph): " + ", ".join(outcome.raw_profiles))
    print(f"\nrun time {seconds:.0f}s")
    document = {
        "benchmark": "throughput",
        "recorded_at": support.recorded_at(),
        "store": store,
        "jobledger": code,
        **support.machine(),
        "load_average_before": before,
        "load_average_after": support.load_average(),
        "run_seconds": round(seconds, 1),
        "sizes": asdict(size),
        "settings": {
            "enqueue_window": ENQUEUE_WINDOW,
            "send_threads": SEND_THREADS,
            "celery": "--pool threads --concurrency SLOTS, acks late, no result backend",
            "dramatiq": "--processes 1 --threads SLOTS",
        },
        "skipped": skipped,
        "rows": [asdict(row) for row in outcome.rows],
        "cpu": [asdict(row) for row in outcome.cpu],
        "ratios": [asdict(row) for row in table],
        "checks": outcome.checks,
        "profile": asdict(outcome.profile) if outcome.profile is not None else None,
    }
    path = support.write_json(stem(args, size), document)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
