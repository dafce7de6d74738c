"""Throughput: enqueue N no-op jobs, then drain them with 1 and with 2 worker processes.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops every process it started and the server, and
drops the database at the end, also on an error or Ctrl-C.

    python -m bench.throughput [--quick] [--jobs N] [--slots S] [--systems NAME ...]
        [--repeat N] [--profile] [--oban-python PATH] [--admin-url URL]

jobledger: a ``jobledger projector`` process follows the log into the Redis queue for
the whole run. Enqueue: this process saves N ad-hoc ``test.echo`` executions (what
``Executions.run`` saves) through the group-commit writer, with up to 2,000 saves in
flight; timed until every save has committed, and until all N are ready in Redis.
Drain: ``jobledger worker`` processes with S slots each, timed from the first to the
last ``ExecutionCompleted`` in the log; the log is checked afterwards (N completions,
no execution left open). Then the same with 2 workers on N new executions.

pgqueuer, Oban for Python and Procrastinate, when they can run (``_pg_peers.py``): the
same rounds in a throwaway database each, N no-op jobs enqueued by the library's batch
call and drained by 1 and 2 of its worker processes, counted in its own tables.

Celery and Dramatiq, when importable: the same rounds with N no-op tasks on the same
redis-server (a database number each), sent from this process by 8 threads and drained
by 1 and 2 worker processes of S threads each; every task counts itself in Redis.

Every PostgreSQL database is analyzed after the enqueue and before the drain, outside
the timing. A second table gives the CPU time of each part during the drains
(``/proc``), per job too, and what other programs took meanwhile; a third puts the
systems' rates side by side. With
``--profile``, py-spy (on PATH) samples every jobledger worker, and the projector, during
each drain while one of its threads holds the GIL, and the functions with the most samples
are printed, for the workers and for the projector.
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
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
from bench import _pg_peers as pg_peers
from bench import _rounds as rounds
from bench import _support as support
from bench._rounds import CpuRow, Groups, Outcome, Processes, Row, Sizes
from jobledger.adapters.store import events_table, migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from concurrent.futures import Future
    from types import ModuleType

QUEUE = "default"
SPEC = ExecutionSpec(handler="test.echo", queue=QUEUE)
PREFIX = "bench-tp"  # jobledger's Redis key prefix
SYSTEMS = ("jobledger", "pgqueuer", "oban", "procrastinate", "dramatiq", "celery")
REDIS_SYSTEMS = ("celery", "dramatiq")
REDIS_DB = {"jobledger": 0, "celery": 1, "dramatiq": 2}
TASK_MODULES = {"celery": "bench._celery_tasks", "dramatiq": "bench._dramatiq_tasks"}
KEEPS = {
    "jobledger": "every event in the log (3 per job), read models",
    "dramatiq": "nothing durable (Redis, persistence off)",
    "celery": "nothing durable (Redis, persistence off)",
} | {name: peer.keeps for name, peer in pg_peers.PEERS.items()}
ROOT = rounds.ROOT
DEFAULT_JOBS = 20_000
QUICK_JOBS = 1_000
DEFAULT_SLOTS = 32
WORKER_COUNTS = rounds.WORKER_COUNTS
ENQUEUE_WINDOW = 2_000  # jobledger saves in flight at once
SEND_THREADS = 8  # Celery and Dramatiq: each send waits for its own Redis round trip
QUEUE_POLL = 0.05  # seconds between queue depth reads while enqueuing
PROGRESS_EVERY = rounds.PROGRESS_EVERY
STALL = rounds.STALL
READY_TIMEOUT = 60.0
SETTLE_TIMEOUT = 30.0  # for the Redis queue to empty once every job completed
BUSY_ELSEWHERE_PCT = 25.0  # other programs' CPU during a drain that makes it suspect
PROFILE_TOP = 30
PROFILE_RATE = 100  # py-spy samples per second

COMPLETED = Execution.Completed.TOPIC
ENQUEUED = Execution.Enqueued.TOPIC
LEASED = Execution.Leased.TOPIC


@dataclass(frozen=True)
class SideBySide:
    """One system's rates over the run, and how jobledger's drains compare with them."""

    system: str
    enqueue_per_s: float | None  # over both rounds
    drain_1_per_s: float | None
    drain_2_per_s: float | None
    ms_per_job_1: float | None  # CPU of the system's parts per job, from the CPU table
    ms_per_job_2: float | None
    jobledger_x_1: float | None  # jobledger's drain rate divided by this one's
    jobledger_x_2: float | None
    keeps: str  # what the system keeps of a job, and where


def with_db(redis_url: str, db: int) -> str:
    return f"{redis_url.rpartition('/')[0]}/{db}"


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

    def transactions(self) -> int:
        """Transactions the server has ended in this database (committed or rolled
        back): every process's, this counter's own few included."""
        self._conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self._conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
        return 0 if row is None else int(row[0])

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

    def analyze(self, label: str) -> None:
        support.analyze(self._conn, label)

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
    """One py-spy recording of a role's processes (the workers, or the projector) in a round."""

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

    def __init__(self, binary: str, folder: Path, role: str = "workers") -> None:
        self._binary = binary
        self._folder = folder
        self.role = role
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
        self,
        url: str,
        redis_url: str,
        size: Sizes,
        processes: Processes,
        spies: Sequence[Spy] = (),
    ) -> None:
        self.size = size
        self.processes = processes
        self.spies = spies
        jl_redis = with_db(redis_url, REDIS_DB["jobledger"])
        self.settings = load_settings(
            {},
            test_handlers="true",
            database_url=url,
            redis_url=jl_redis,
            redis_prefix=PREFIX,
            log_level="warning",
        )
        self.env = rounds.subprocess_env(
            JOBLEDGER_DATABASE_URL=url,
            JOBLEDGER_REDIS_URL=jl_redis,
            JOBLEDGER_REDIS_PREFIX=PREFIX,
            JOBLEDGER_WORKER_SLOTS=str(size.slots),
            JOBLEDGER_WORKER_QUEUES=QUEUE,
            JOBLEDGER_LOG_FORMAT="json",
        )
        self.command = [sys.executable, "-m", "jobledger.cli"]
        self.completed_before = 0  # completions in the log before this run (run)

    def run(self, base: Groups) -> Outcome:
        migrate(self.settings, progress=support.log)
        configure_logging(self.settings)
        projector = self.processes.start(
            "jobledger-projector", [*self.command, "projector"], self.env
        )
        outcome = Outcome()
        with bootstrap(self.settings) as container:
            counter = LogCounter(self.settings.database_url, events_table(self.settings))
            # Rounds of an earlier repetition are in the same log.
            self.completed_before = counter.audit()["completed"]
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
                    outcome.checks.append(f"{rounds.label(row.system, workers)}: {row.note}")
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
        label = rounds.label("jobledger", workers)
        enqueue_s, in_queue_s = enqueue_jobledger(container, jobs, label)
        counter.analyze(label)
        before = counter.count()
        start_position = counter.position
        transactions = counter.transactions()
        spawned = [
            self.processes.start(
                f"jobledger-worker-r{number}-{k}", [*self.command, "worker"], self.env
            )
            for k in range(workers)
        ]

        def attach() -> None:
            for spy in self.spies:
                pids = [projector.pid] if spy.role == "projector" else [p.pid for p in spawned]
                spy.attach(pids, f"r{number}")

        watched = rounds.watch_drain(
            label,
            jobs,
            count=lambda: counter.count() - before,
            watch=[*spawned, projector],
            processes=self.processes,
            groups=groups | {"worker": rounds.tree_of(spawned)},
            on_first=attach,
        )
        for spy in self.spies:
            spy.stop()
        stats = []
        for process in spawned:
            self.processes.stop(process)
            stats.append(worker_stats(self.processes.log_path(process)))
        # After the workers ended: a backend reports its counts when it closes, and
        # otherwise up to a second or more late.
        transactions = counter.transactions() - transactions
        first, last, completed = counter.completion_span(container, start_position)
        note = check_round(container, counter, self.completed_before + jobs * number, stats)
        note += f"; {transactions / jobs:.2f} PostgreSQL transactions a job"
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
        return row, watched.cpu_row("jobledger", workers)


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
    check_read_models(container)
    extra = audit["leased"] - expected
    stale = sum(int(str(s.get("stale_reports", 0))) for s in stats)
    notes = [f"log: {audit['completed']:,} completed, 0 open; read models = a rebuild"]
    if extra or audit["other_events"]:
        notes.append(f"{extra:,} extra leases, {audit['other_events']:,} other events")
    if stale:
        notes.append(f"{stale} stale reports")
    return "; ".join(notes)


def check_read_models(container: Container) -> None:
    """The read models, once the projector has caught up, equal a rebuild of them
    from the log (outside the timing). Raises if not."""
    models = container.read_models()
    support.wait_for(lambda: models.lag() == 0, SETTLE_TIMEOUT, "current read models", poll=0.1)
    followed = support.fingerprint(container.settings.database_url)
    models.rebuild()
    rebuilt = support.fingerprint(container.settings.database_url)
    differ = [table for table in followed if followed[table] != rebuilt[table]]
    if differ:
        raise RuntimeError(f"the read models differ from a rebuild in {', '.join(differ)}")


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
        env = rounds.subprocess_env(BENCH_BROKER_URL=broker_url)
        for round_number, workers in enumerate(WORKER_COUNTS, start=1):
            label = rounds.label(system, workers)
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
            groups = base | {"worker": rounds.tree_of(spawned)}
            watched = rounds.watch_drain(
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
            cpu = watched.cpu_row(system, workers)
            if cpu is not None:
                outcome.cpu.append(cpu)
    finally:
        client.close()
    outcome.versions[system] = rounds.versions(sys.executable, [system])
    return outcome


# ---- the figures -----------------------------------------------------------------------


def side_by_side(
    rows: Sequence[Row], cpu: Sequence[CpuRow], skipped: Mapping[str, str]
) -> list[SideBySide]:
    """Per system: the enqueue rate over all its rounds, the drain rate and CPU per job
    with 1 and with 2 workers (the medians, when the rounds ran more than once), and
    jobledger's drain rate divided by that system's; a system that did not run, with
    the reason."""
    drains = medians((r.system, r.workers, r.drain_per_s) for r in rows)
    per_job = medians((c.system, c.workers, c.ms_per_job) for c in cpu)

    def times(workers: int, system: str) -> float | None:
        if system == "jobledger":
            return None
        mine, theirs = drains.get(("jobledger", workers)), drains.get((system, workers))
        return round(mine / theirs, 2) if mine and theirs else None

    result = []
    for system in SYSTEMS:
        mine = [r for r in rows if r.system == system]
        if system in skipped:
            nothing = (None,) * 7
            result.append(SideBySide(system, *nothing, f"not run: {skipped[system]}"))
        if not mine:
            continue
        jobs, seconds = sum(r.jobs for r in mine), sum(r.enqueue_s for r in mine)
        one, two = WORKER_COUNTS
        result.append(
            SideBySide(
                system,
                support.rate(jobs, seconds),
                drains.get((system, one)),
                drains.get((system, two)),
                per_job.get((system, one)),
                per_job.get((system, two)),
                times(one, system),
                times(two, system),
                KEEPS[system],
            )
        )
    return result


def medians(
    values: Iterable[tuple[str, int, float | None]],
) -> dict[tuple[str, int], float]:
    """The median value by (system, workers), of those that are not None."""
    gathered: dict[tuple[str, int], list[float]] = {}
    for system, workers, value in values:
        if value is not None:
            gathered.setdefault((system, workers), []).append(value)
    return {key: round(statistics.median(found), 3) for key, found in gathered.items()}


COLUMNS = (
    ("system", "{:<13}"),
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
    ("system", "{:<13}"),
    ("workers", "{:>7}"),
    ("seconds", "{:>7}"),
    ("jobs", "{:>6}"),
    ("worker_pct", "{:>10}"),
    ("projector_pct", "{:>13}"),
    ("postgres_pct", "{:>12}"),
    ("redis_pct", "{:>9}"),
    ("bench_pct", "{:>9}"),
    ("machine_pct", "{:>11}"),
    ("other_pct", "{:>9}"),
    ("ms_per_job", "{:>10}"),
)
SIDE_COLUMNS = (
    ("system", "{:<13}"),
    ("enqueue_per_s", "{:>13}"),
    ("drain_1_per_s", "{:>13}"),
    ("drain_2_per_s", "{:>13}"),
    ("ms_per_job_1", "{:>12}"),
    ("ms_per_job_2", "{:>12}"),
    ("jobledger_x_1", "{:>13}"),
    ("jobledger_x_2", "{:>13}"),
    ("keeps", "{}"),
)


def show(value: object) -> str:
    """As ``support.show``, but large floats without decimals, small ones with three (CPU
    per job is a fraction of a millisecond) and ints with separators."""
    if isinstance(value, float) and value >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, float) and 0 < value < 1:
        return f"{value:.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return support.show(value)


def format_profile(profile: Profile, role: str = "workers") -> str:
    title = f"jobledger {role} under py-spy --gil ({PROFILE_RATE} samples/s)"
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
        "--repeat",
        type=int,
        default=1,
        help="run every system's rounds this many times, one system after the other each"
        " time; the side-by-side table takes the medians (default 1)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the jobledger workers and projector with py-spy (the first time)",
    )
    parser.add_argument(
        "--oban-python",
        metavar="PATH",
        help="a Python 3.12 or later to make Oban's virtual environment from"
        " (default: one found on PATH or among pyenv's versions)",
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


@dataclass
class Results:
    outcome: Outcome = field(default_factory=Outcome)
    skipped: dict[str, str] = field(default_factory=dict)  # system: why it did not run
    profiles: dict[str, Profile] = field(default_factory=dict)  # by role
    raw_profiles: list[str] = field(default_factory=list)


def settings(size: Sizes) -> dict[str, str]:
    """How each system runs here, for the notes and the JSON."""
    slots = size.slots
    return {
        "jobledger": (
            f"{slots} slots per worker, one projector process; enqueue through the"
            f" group-commit writer, {ENQUEUE_WINDOW:,} saves in flight"
        ),
        **{name: peer.settings for name, peer in pg_peers.PEERS.items()},
        "dramatiq": f"--processes 1 --threads {slots}; sent from {SEND_THREADS} threads",
        "celery": (
            f"--pool threads --concurrency {slots}, acks late, no result backend;"
            f" sent from {SEND_THREADS} threads"
        ),
    }


@dataclass(frozen=True)
class Stores:
    """What every system's rounds run on."""

    size: Sizes
    url: str
    redis_url: str
    redis_pid: int
    base: Groups  # the CPU groups every system shares: PostgreSQL, Redis, this process


def run_all(
    args: argparse.Namespace, size: Sizes, url: str, redis_url: str, spy_binary: str | None
) -> Results:
    """Every system asked for that can run here, ``--repeat`` times; the others with
    the reason."""
    redis_pid = support.redis_server_pid(redis_url)
    base = rounds.base_groups(url.rpartition("/")[2], redis_pid)
    stores = Stores(size, url, redis_url, redis_pid, base)
    results = Results()
    with rounds.work_folder() as folder:
        processes = Processes(folder)
        try:
            for repetition in range(args.repeat):
                if args.repeat > 1:
                    support.log(f"repetition {repetition + 1}/{args.repeat}")
                spy = spy_binary if repetition == 0 else None
                for system in args.systems:
                    if system not in results.skipped:
                        run_system(system, args, stores, processes, spy=spy, results=results)
        finally:
            processes.close()
    return results


def run_system(
    system: str,
    args: argparse.Namespace,
    stores: Stores,
    processes: Processes,
    *,
    spy: str | None,
    results: Results,
) -> None:
    """One system's rounds into ``results``, or why it cannot run here."""
    size, url, redis_url = stores.size, stores.url, stores.redis_url
    if system == "jobledger":
        roles = ("workers", "projector") if spy else ()
        spies = [Spy(spy or "", processes.folder, role) for role in roles]
        results.outcome.add(JobledgerRun(url, redis_url, size, processes, spies).run(stores.base))
        for one in spies:
            results.profiles[one.role] = one.profile(PROFILE_TOP)
            results.raw_profiles += [str(p) for p in one.keep(stem(args, size))]
        return
    part = run_peer(system, args, size, processes, (redis_url, stores.base, stores.redis_pid))
    if isinstance(part, str):
        results.skipped[system] = part
        support.log(f"{system}: skipped, {part}")
    else:
        results.outcome.add(part)


def run_peer(
    system: str,
    args: argparse.Namespace,
    size: Sizes,
    processes: Processes,
    redis: tuple[str, Groups, int],
) -> Outcome | str:
    """The rounds of a system other than jobledger, or why it cannot run here."""
    redis_url, base, redis_pid = redis
    if system in REDIS_SYSTEMS:
        if not importable(system):
            return "not installed (pip install -e '.[bench]')"
        return run_library(system, redis_url, base, size, processes)
    python, why = pg_peers.interpreter(pg_peers.PEERS[system], args.oban_python)
    if python is None:
        return why
    return pg_peers.run_peer(
        system,
        python=python,
        admin_url=args.admin_url,
        size=size,
        processes=processes,
        redis_pid=redis_pid,
    )


def print_tables(results: Results, size: Sizes, autovacuum: str) -> list[SideBySide]:
    outcome = results.outcome
    print(
        f"{size.jobs:,} no-op jobs per round; {size.slots} slots (threads, sub-workers,"
        " queue limit) per worker process; every PostgreSQL database analyzed after the"
        " enqueue\n"
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
    table = side_by_side(outcome.rows, outcome.cpu, results.skipped)
    print("\nSide by side (jobledger_x: jobledger's drain rate divided by this one's)")
    print(support.format_table(table, SIDE_COLUMNS, show))
    print("\nNotes:")
    print(
        f"- autovacuum is {autovacuum} on this server: each PostgreSQL system's database"
        " is analyzed (ANALYZE) after its enqueue and before its drain, outside the timing"
    )
    print(
        "- ms_per_job: CPU time of the workers, the projector, PostgreSQL and Redis"
        " between the first and the last completion seen, per job completed in between"
    )
    ran = {row.system for row in outcome.rows}
    for system, text in settings(size).items():
        if system in ran:
            version = outcome.versions.get(system)
            print(f"- {system}{f' ({version})' if version else ''}: {text}")
    for system, why in results.skipped.items():
        print(f"- {system}: skipped, {why}")
    return table


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
            autovacuum = support.autovacuum(url)
            support.log(
                f"store: {store}, autovacuum {autovacuum}; {os.cpu_count()} CPUs;"
                f" load average {before}"
            )
            support.log(f"jobledger: {code}")
            results = run_all(args, size, url, redis_url, spy_binary)
    except KeyboardInterrupt:
        support.log(
            "interrupted; the processes and redis-server were stopped, the databases dropped"
        )
        return 130
    seconds = time.perf_counter() - begun
    table = print_tables(results, size, autovacuum)
    for role, profile in results.profiles.items():
        print()
        print(format_profile(profile, role))
    if results.raw_profiles:
        print("raw stacks (collapsed, for a flame graph): " + ", ".join(results.raw_profiles))
    print(f"\nrun time {seconds:.0f}s")
    document = {
        "benchmark": "throughput",
        "recorded_at": support.recorded_at(),
        "store": store,
        "autovacuum": autovacuum,
        "analyzed_before_drain": True,
        "jobledger": code,
        **support.machine(),
        "load_average_before": before,
        "load_average_after": support.load_average(),
        "run_seconds": round(seconds, 1),
        "sizes": asdict(size),
        "settings": settings(size),
        "versions": results.outcome.versions,
        "skipped": results.skipped,
        "rows": [asdict(row) for row in results.outcome.rows],
        "cpu": [asdict(row) for row in results.outcome.cpu],
        "side_by_side": [asdict(row) for row in table],
        "checks": results.outcome.checks,
        "profile": {role: asdict(p) for role, p in results.profiles.items()} or None,
    }
    path = support.write_json(stem(args, size), document)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
