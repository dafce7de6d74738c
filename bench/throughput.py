"""Throughput: enqueue N no-op jobs through jobledger's API as deployed, then drain them
with 1 and with 2 worker processes; the same beside the queues users compare it with.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops every process it started and the server, and
drops the databases at the end, also on an error or Ctrl-C.

    python -m bench.throughput [--quick] [--jobs N] [--slots S] [--systems NAME ...]
        [--repeat N] [--concurrency C] [--samples N] [--profile] [--oban-python PATH]
        [--admin-url URL]

jobledger runs as the Procfile runs it: ``jobledger migrate``, then ``jobledger api``,
``jobledger projector`` and ``jobledger scheduler`` as processes of their own for the
whole run, each with its metrics port, in production mode, with an admin password set
(the API creates the admin from it) and an operator token made with ``jobledger token
create``; the handler is a user's (``bench/_jobledger_tasks.py``, through
``JOBLEDGER_HANDLERS``), the ``test.*`` handlers are off. One setting differs from the
defaults: the runs a credential may create a minute (``JOBLEDGER_API_RUNS_PER_MINUTE``),
raised so that the budget does not refuse a round's N runs.

A round: this process sends N runs through ``POST /api/v1/executions:batch`` (the
async client's ``enqueue_many``, 1,000 runs a request, the route's limit), C requests in
flight at once. The enqueue is timed from the first request until every request was
answered (accepted) and until all N are ready in Redis (leasable: the projector caught
up). Then ``jobledger worker`` processes with S slots each are started; the drain is
timed from the first handler start (each worker process writes down its first, see
``_starts.py``) until the count of ``ExecutionCompleted`` events committed to the log
reaches N (polled every 50 ms near the end), and checked afterwards: N completions, none
open, the Redis queue empty, the read models equal to a rebuild. Then the same with 2
workers on N new runs.

CPU time (``/proc/<pid>/stat``, user + system, every process of a role's tree) of the
api, the projector, the scheduler and the workers, of PostgreSQL (its background
processes and the sessions of the benchmark's database) and of redis-server, over the
drain and over the whole round: from the first enqueue request until quiet (the
system's processes and redis-server idle, at most 2 % of a core over 0.5 s, after the
last completion). A worker counts from its first handler start: its start-up (imports,
connections) is paid once by a deployment, not per job. The sender's CPU is shown
apart (``client``).

pgqueuer, Oban for Python and Procrastinate, when they can run (``_pg_peers.py``): the
same rounds in a throwaway database per configuration, N no-op jobs enqueued by the
library's batch call and drained by 1 and 2 of its worker processes, counted in its
own tables; each both without and with ANALYZE after the enqueue, pgqueuer with
several dequeue batch sizes; the best configuration (by its drain rate) is the one
compared. Celery and Dramatiq, when importable: N tasks sent from this process by 8
threads to the same redis-server, drained by 1 and 2 worker processes of S threads.

Start latency at low load, for jobledger and pgqueuer: one job at a time, a gap
between, to one idle worker: from just before the enqueue call to the handler's start,
and for jobledger to the answer of the client's ``wait`` (the API's long-poll ``GET``).

With ``--repeat N`` every system's rounds run N times, one system after the other each
time; the tables give the median and the spread (min-max). With ``--profile``, py-spy
(on PATH) samples the jobledger workers and the projector during the first drains.
"""

from __future__ import annotations

import asyncio
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
from typing import TYPE_CHECKING, LiteralString

import httpx
import psycopg
import redis
from psycopg import sql

import jobledger
from bench import _completions as completions
from bench import _jobledger_tasks as tasks
from bench import _pg_peers as pg_peers
from bench import _rounds as rounds
from bench import _starts as starts
from bench import _support as support
from bench._rounds import CpuRow, Enqueued, Groups, Outcome, Processes, RoundOf, Row, Sizes
from jobledger.adapters.store import events_table
from jobledger.bootstrap import Container, bootstrap
from jobledger.client import AsyncClient, Client
from jobledger.domain.execution import Execution
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings
from jobledger.schemas.executions import MAX_BATCH_RUNS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from types import ModuleType

QUEUE = "default"
PREFIX = "bench-tp"  # jobledger's Redis key prefix
SYSTEMS = ("jobledger", "pgqueuer", "oban", "procrastinate", "dramatiq", "celery")
PG_PEERS = ("pgqueuer", "oban", "procrastinate")
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
DEFAULT_CONCURRENCY = 8  # batch requests in flight at once
ADMIN_PASSWORD = "bench-throughput-7Kq2"  # noqa: S105 (a throwaway database's admin)
RUNS_PER_MINUTE = 1_000_000  # JOBLEDGER_API_RUNS_PER_MINUTE: the most it takes
SEND_THREADS = 8  # Celery and Dramatiq: each send waits for its own Redis round trip
QUEUE_POLL = 0.02  # seconds between queue depth reads while enqueuing
PROGRESS_EVERY = rounds.PROGRESS_EVERY
STALL = rounds.STALL
READY_TIMEOUT = 60.0
SETTLE_TIMEOUT = 30.0  # for the Redis queue to empty once every job completed
DEFAULT_SAMPLES = 200  # start latency: jobs, one at a time
QUICK_SAMPLES = 20
SAMPLE_GAP = 0.02  # seconds between them
WAIT_TIMEOUT = 30.0
BUSY_ELSEWHERE_PCT = 25.0  # other programs' CPU during a drain that makes it suspect
PROFILE_TOP = 30
PROFILE_RATE = 100  # py-spy samples per second

COMPLETED = Execution.Completed.TOPIC
ENQUEUED = Execution.Enqueued.TOPIC
LEASED = Execution.Leased.TOPIC


def with_db(redis_url: str, db: int) -> str:
    return f"{redis_url.rpartition('/')[0]}/{db}"


# ---- jobledger -------------------------------------------------------------------------


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


class Deployment:
    """jobledger's roles as processes, as the Procfile runs them, and an operator token."""

    ROLES = ("api", "projector", "scheduler")

    def __init__(self, url: str, redis_url: str, size: Sizes, processes: Processes) -> None:
        self.processes = processes
        self.api_port = support.free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        jl_redis = with_db(redis_url, REDIS_DB["jobledger"])
        self.env = rounds.subprocess_env(
            JOBLEDGER_DATABASE_URL=url,
            JOBLEDGER_REDIS_URL=jl_redis,
            JOBLEDGER_REDIS_PREFIX=PREFIX,
            JOBLEDGER_HANDLERS=tasks.HANDLERS,
            JOBLEDGER_TEST_HANDLERS="false",
            JOBLEDGER_WORKER_SLOTS=str(size.slots),
            JOBLEDGER_WORKER_QUEUES=QUEUE,
            JOBLEDGER_ADMIN_PASSWORD=ADMIN_PASSWORD,
            JOBLEDGER_API_PORT=str(self.api_port),
            JOBLEDGER_API_RUNS_PER_MINUTE=str(RUNS_PER_MINUTE),
        )
        # This process reads the queue and the read models for the checks, and the
        # handler's module must import where the settings are loaded.
        self.settings = load_settings(
            {}, database_url=url, redis_url=jl_redis, redis_prefix=PREFIX, log_level="warning"
        )
        self.command = [sys.executable, "-m", "jobledger.cli"]
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.token = ""
        self.idle: dict[str, float] = {}  # % of a core each role uses when idle

    def start_role(
        self, name: str, role: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        own = {"JOBLEDGER_METRICS_PORT": str(support.free_port())} if role != "api" else {}
        return self.processes.start(
            f"jobledger-{name}", [*self.command, role], self.env | own | dict(env or {})
        )

    def start(self) -> None:
        """``jobledger migrate``, then the roles; returns once the API answers, the
        projector follows the log and a token is made."""
        self.processes.run("jobledger-migrate", [*self.command, "migrate"], self.env)
        for role in self.ROLES:
            self.running[role] = self.start_role(role, role)

        def serving() -> bool:
            self.processes.check(list(self.running.values()))
            try:
                return httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        support.wait_for(serving, READY_TIMEOUT, "the API's start", poll=0.1)
        made = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
            [*self.command, "token", "create", "bench-throughput", "--role", "operator"],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise RuntimeError(f"jobledger token create failed: {made.stderr.strip()}")
        self.token = made.stdout.strip()
        self._measure_idle()

    def _measure_idle(self) -> None:
        """What the roles, and one worker, use with nothing to do: the floor above
        which a round is not yet quiet."""
        worker = self.start_role("idle-worker", "worker")
        try:
            time.sleep(READY_TIMEOUT / 20)  # its start-up
            self.idle = rounds.idle_floor(self.groups() | {"worker": rounds.tree_of([worker])})
        finally:
            self.processes.stop(worker)
        shown = ", ".join(f"{name} {pct:g}%" for name, pct in self.idle.items())
        support.log(f"jobledger: idle, % of a core: {shown}")

    def idle_pct(self, workers: int) -> float:
        """The idle floor of the roles, the workers and redis-server."""
        return sum(self.idle.values()) + (workers - 1) * self.idle.get("worker", 0.0)

    def groups(self) -> Groups:
        return {role: rounds.tree_of([process]) for role, process in self.running.items()}

    def stop(self) -> None:
        for process in reversed(list(self.running.values())):
            self.processes.stop(process)
        self.running.clear()


async def send_batches(url: str, token: str, jobs: int, concurrency: int) -> None:
    """``jobs`` runs of the no-op handler through the batch route, ``concurrency``
    requests of up to MAX_BATCH_RUNS runs in flight at once, as the async client sends."""
    gate = asyncio.Semaphore(concurrency)
    tag = uuid.uuid4().hex[:12]

    async def batch(client: AsyncClient, number: int, count: int) -> None:
        async with gate:
            refs = await client.enqueue_many(
                tasks.NAME, [{}] * count, queue=QUEUE, idempotency_key=f"{tag}-{number}"
            )
        if len(refs) != count:
            raise RuntimeError(f"a batch of {count} runs answered {len(refs)}")

    async with AsyncClient(url, token, timeout=120.0) as client:
        sizes = [min(MAX_BATCH_RUNS, jobs - start) for start in range(0, jobs, MAX_BATCH_RUNS)]
        await asyncio.gather(*(batch(client, n, size) for n, size in enumerate(sizes)))


class Leasable:
    """Polls the Redis queue from a thread of its own until ``jobs`` runs are ready."""

    def __init__(self, container: Container, jobs: int) -> None:
        self._container = container
        self._jobs = jobs
        self.ready = 0
        self.at: float | None = None  # Unix time they were
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-depths", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.ready = self._container.queue.depths(QUEUE, now=datetime.now(UTC)).ready
                if self.ready >= self._jobs:
                    self.at = time.time()
                    return
                time.sleep(QUEUE_POLL)
        except BaseException as error:  # noqa: BLE001 (re-raised by the main thread)
            self.error = error

    def stop(self) -> None:
        self._stop.set()

    def wait(self, label: str) -> float:
        last, last_change = -1, time.perf_counter()
        while self.at is None:
            if self.error is not None:
                raise self.error
            if self.ready != last:
                last, last_change = self.ready, time.perf_counter()
            elif time.perf_counter() - last_change > STALL:
                self.stop()
                raise RuntimeError(f"{label}: stuck at {last:,}/{self._jobs:,} in the queue")
            time.sleep(QUEUE_POLL)
        return self.at


def enqueue_jobledger(
    deployment: Deployment, container: Container, groups: Groups, jobs: int, how: tuple[str, int]
) -> Enqueued:
    """Send ``jobs`` runs through the API; when they were accepted and leasable."""
    label, concurrency = how
    support.log(f"{label}: sending {jobs:,} runs, {concurrency} batch requests at once")
    begun = rounds.cpu_sample(groups)
    cpu = time.process_time()
    leasable = Leasable(container, jobs)
    try:
        asyncio.run(send_batches(deployment.api_url, deployment.token, jobs, concurrency))
    except BaseException:
        leasable.stop()
        raise
    accepted = time.time() - begun.at
    client_cpu = time.process_time() - cpu
    leasable_s = leasable.wait(label) - begun.at
    support.log(
        f"{label}: {jobs:,} accepted in {accepted:.2f}s ({jobs / accepted:,.0f}/s),"
        f" leasable after {leasable_s:.2f}s; sender CPU {100 * client_cpu / accepted:.0f}%"
    )
    return Enqueued(begun, accepted, leasable_s, client_cpu, client_is_bench=True)


class JobledgerRun:
    """The jobledger rounds of one repetition, on its deployment: N runs through the
    API, then worker processes draining them, each round on new runs."""

    def __init__(
        self,
        deployment: Deployment,
        size: Sizes,
        concurrency: int,
        spies: Sequence[Spy] = (),
    ) -> None:
        self.deployment = deployment
        self.size = size
        self.concurrency = concurrency
        self.processes = deployment.processes
        self.spies = spies
        self.completed_before = 0  # completions in the log before these rounds

    def run(
        self, base: Groups, repetition: int, samples: int
    ) -> tuple[Outcome, list[pg_peers.Probe]]:
        outcome = Outcome()
        probes: list[pg_peers.Probe] = []
        deployment = self.deployment
        configure_logging(deployment.settings)
        with bootstrap(deployment.settings) as container:
            counter = LogCounter(
                deployment.settings.database_url, events_table(deployment.settings)
            )
            self.completed_before = counter.audit()["completed"]
            try:
                groups = base | deployment.groups()
                for number, workers in enumerate(WORKER_COUNTS, start=1):
                    of = RoundOf("jobledger", "", repetition, workers, self.size.jobs)
                    row, cpu = self._round(container, counter, of, number, groups)
                    outcome.rows.append(row)
                    outcome.cpu += cpu
                    outcome.checks.append(f"{rounds.label('jobledger', workers)}: {row.note}")
                if samples:
                    probes = self._probe(samples)
            finally:
                counter.close()
        return outcome, probes

    def _round(
        self, container: Container, counter: LogCounter, of: RoundOf, number: int, groups: Groups
    ) -> tuple[Row, list[CpuRow]]:
        jobs = self.size.jobs
        label = rounds.label("jobledger", of.workers)
        before = counter.count()
        transactions = counter.transactions()
        enqueued = enqueue_jobledger(
            self.deployment, container, groups, jobs, (label, self.concurrency)
        )
        folder = self.processes.folder / f"jobledger-starts-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        spawned_at = time.time()
        spawned = [
            self.deployment.start_role(
                f"worker-r{of.repetition}-{number}-{k}",
                "worker",
                {starts.FOLDER_VARIABLE: str(folder)},
            )
            for k in range(of.workers)
        ]

        def attach() -> None:
            for spy in self.spies:
                projector = self.deployment.running["projector"]
                pids = [projector.pid] if spy.role == "projector" else [p.pid for p in spawned]
                spy.attach(pids, f"r{number}")

        try:
            drained = rounds.watch_drain(
                label,
                jobs,
                count=lambda: counter.count() - before,
                watch=[*spawned, *self.deployment.running.values()],
                processes=self.processes,
                groups=groups | {"worker": rounds.tree_of(spawned)},
                starts_folder=folder,
                spawned=spawned_at,
                idle_pct=self.deployment.idle_pct(of.workers),
                on_first=attach,
            )
        finally:
            for spy in self.spies:
                spy.stop()
            stats = []
            for process in spawned:
                self.processes.stop(process)
                stats.append(worker_stats(self.processes.log_path(process)))
        # After the workers ended: a backend reports its counts when it closes.
        transactions = counter.transactions() - transactions
        expected = self.completed_before + jobs * number
        note = check_round(container, counter, expected, stats)
        note += f"; {transactions / jobs:.2f} PostgreSQL transactions a job"
        return rounds.round_rows(of, enqueued, drained, note)

    def _probe(self, samples: int) -> list[pg_peers.Probe]:
        """The start latency at low load: one run at a time through the API to one
        idle worker, and the client's wait for it."""
        worker = self.deployment.start_role("probe-worker", "worker")
        probes = []
        try:
            with Client(self.deployment.api_url, self.deployment.token) as client:
                warm_up = client.enqueue(tasks.NAME, {}, queue=QUEUE)
                client.wait(warm_up.id, timeout=READY_TIMEOUT)
                support.log(f"jobledger: start latency, {samples} runs one at a time")
                for _ in range(samples):
                    sent = time.time()
                    ref = client.enqueue(tasks.NAME, {}, queue=QUEUE)
                    answered = time.time()
                    result = client.wait(ref.id, timeout=WAIT_TIMEOUT)
                    waited = time.time()
                    probes.append(pg_peers.Probe(sent, answered, float(result["started"]), waited))
                    time.sleep(SAMPLE_GAP)
        finally:
            self.processes.stop(worker)
        return probes


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
    system: str,
    redis_url: str,
    base: Groups,
    size: Sizes,
    processes: Processes,
    *,
    repetition: int,
) -> Outcome:
    broker_url = with_db(redis_url, REDIS_DB[system])
    module = load_tasks(system, broker_url)
    send: Callable[[], object] = module.noop.delay if system == "celery" else module.noop.send
    client = redis.Redis.from_url(broker_url)
    outcome = Outcome()
    try:
        client.flushdb()
        env = rounds.subprocess_env(BENCH_BROKER_URL=broker_url)
        for round_number, workers in enumerate(WORKER_COUNTS, start=1):
            label = rounds.label(system, workers)
            completions.reset(client)
            support.log(f"{label}: sending {size.jobs:,} tasks from {SEND_THREADS} threads")
            begun = rounds.cpu_sample(base)
            cpu = time.process_time()
            enqueue_s = send_all(send, size.jobs)
            # A sent task is in its Redis list: accepted and leasable at once.
            enqueued = Enqueued(
                begun, enqueue_s, enqueue_s, time.process_time() - cpu, client_is_bench=True
            )
            support.log(
                f"{label}: {size.jobs:,} sent in {enqueue_s:.2f}s ({size.jobs / enqueue_s:,.0f}/s)"
            )
            folder = processes.folder / f"{system}-starts-{uuid.uuid4().hex[:8]}"
            folder.mkdir()
            spawned_at = time.time()
            spawned = [
                processes.start(
                    f"{system}-worker-r{repetition}-{round_number}-{k}",
                    worker_command(system, size.slots, f"bench{k}"),
                    env | {starts.FOLDER_VARIABLE: str(folder)},
                )
                for k in range(workers)
            ]
            try:
                drained = rounds.watch_drain(
                    label,
                    size.jobs,
                    count=lambda: completions.count(client),
                    watch=spawned,
                    processes=processes,
                    groups=base | {"worker": rounds.tree_of(spawned)},
                    starts_folder=folder,
                    spawned=spawned_at,
                )
            finally:
                for process in spawned:
                    processes.stop(process)
            done = completions.count(client)
            if done != size.jobs:
                raise RuntimeError(f"{label}: {done:,} of {size.jobs:,} tasks ran")
            of = RoundOf(system, "", repetition, workers, size.jobs)
            row, cpu_rows = rounds.round_rows(of, enqueued, drained, f"{done:,} tasks counted")
            outcome.rows.append(row)
            outcome.cpu += cpu_rows
    finally:
        client.close()
    outcome.versions[system] = rounds.versions(sys.executable, [system])
    return outcome


# ---- the figures -----------------------------------------------------------------------


def spread(values: Sequence[float], digits: int) -> str:
    """``median (min-max)`` of the values, or the one value; ``-`` for none."""
    if not values:
        return "-"
    shown = [f"{value:,.{digits}f}" for value in (statistics.median(values), *values)]
    if len(values) == 1:
        return shown[0]
    return f"{shown[0]} ({f'{min(values):,.{digits}f}'}-{f'{max(values):,.{digits}f}'})"


def best_configs(rows: Sequence[Row]) -> dict[tuple[str, int], str]:
    """Per (system, workers): the configuration with the highest median drain rate."""
    rates: dict[tuple[str, int, str], list[float]] = {}
    for row in rows:
        rates.setdefault((row.system, row.workers, row.config), []).append(row.drain_per_s)
    best: dict[tuple[str, int], tuple[float, str]] = {}
    for (system, workers, config), found in rates.items():
        median = statistics.median(found)
        if (system, workers) not in best or median > best[system, workers][0]:
            best[system, workers] = (median, config)
    return {key: config for key, (_, config) in best.items()}


@dataclass(frozen=True)
class ConfigRow:
    """A peer's configuration: its drain rates (medians), and whether it is the best."""

    system: str
    config: str
    drain_1_per_s: float | None
    drain_2_per_s: float | None
    best_for: str


@dataclass(frozen=True)
class RateRow:
    system: str
    config: str
    accepted_per_s: str
    leasable_per_s: str
    drain_1_per_s: str
    drain_2_per_s: str
    keeps: str


@dataclass(frozen=True)
class CpuSummary:
    system: str
    drain_1: str  # own CPU, ms per job
    drain_2: str
    round_1: str
    round_2: str
    client_round_1: str


@dataclass(frozen=True)
class RatioRow:
    """jobledger's figure divided by a system's, per repetition; median (min-max)."""

    system: str
    drain_x_1: str
    drain_x_2: str
    cpu_drain_x_1: str
    cpu_drain_x_2: str
    cpu_round_x_1: str
    cpu_round_x_2: str


@dataclass(frozen=True)
class LatencyRow:
    system: str
    measure: str
    samples: int
    p50_ms: float
    p90_ms: float
    p99_ms: float


class Figures:
    """The rows of the best configurations, by (system, workers, repetition)."""

    def __init__(self, outcome: Outcome) -> None:
        self.best = best_configs(outcome.rows)
        self.rows = [r for r in outcome.rows if self.best.get((r.system, r.workers)) == r.config]
        self.cpu = [c for c in outcome.cpu if self.best.get((c.system, c.workers)) == c.config]
        self.all_rows = outcome.rows

    def systems(self) -> list[str]:
        ran = {row.system for row in self.rows}
        return [system for system in SYSTEMS if system in ran]

    def drains(self, system: str, workers: int) -> dict[int, float]:
        return {
            r.repetition: r.drain_per_s
            for r in self.rows
            if r.system == system and r.workers == workers
        }

    def own(self, system: str, workers: int, window: str) -> dict[int, float]:
        return {
            c.repetition: c.own
            for c in self.cpu
            if (c.system, c.workers, c.window) == (system, workers, window)
        }

    def configs(self) -> list[ConfigRow]:
        found: dict[tuple[str, str], dict[int, list[float]]] = {}
        for row in self.all_rows:
            if row.system in PG_PEERS:
                by = found.setdefault((row.system, row.config), {})
                by.setdefault(row.workers, []).append(row.drain_per_s)
        result = []
        for (system, config), by in found.items():
            chosen = [
                f"{w} worker(s)" for w in WORKER_COUNTS if self.best.get((system, w)) == config
            ]
            medians = [statistics.median(by[w]) if w in by else None for w in WORKER_COUNTS]
            one, two = medians
            result.append(ConfigRow(system, config, one, two, ", ".join(chosen)))
        return result

    def rates(self) -> list[RateRow]:
        result = []
        for system in self.systems():
            mine = [r for r in self.rows if r.system == system]
            configs = sorted({r.config for r in mine})
            one, two = (list(self.drains(system, w).values()) for w in WORKER_COUNTS)
            result.append(
                RateRow(
                    system,
                    " / ".join(configs),
                    spread([r.accepted_per_s for r in mine], 0),
                    spread([r.leasable_per_s for r in mine], 0),
                    spread(one, 0),
                    spread(two, 0),
                    KEEPS[system],
                )
            )
        return result

    def cpu_summary(self) -> list[CpuSummary]:
        result = []
        for system in self.systems():
            cells = [
                spread(list(self.own(system, w, window).values()), 3)
                for window in ("drain", "round")
                for w in WORKER_COUNTS
            ]
            client = [
                c.client
                for c in self.cpu
                if c.system == system and c.window == "round" and c.client is not None
            ]
            drain_1, drain_2, round_1, round_2 = cells
            result.append(CpuSummary(system, drain_1, drain_2, round_1, round_2, spread(client, 3)))
        return result

    def ratios(self) -> list[RatioRow]:
        """jobledger over each other system, repetition by repetition."""

        def ratio(mine: Mapping[int, float], theirs: Mapping[int, float]) -> str:
            values = [mine[k] / theirs[k] for k in mine if theirs.get(k)]
            return spread(values, 2)

        result = []
        for system in self.systems():
            if system == "jobledger":
                continue
            cells = [
                ratio(self.drains("jobledger", w), self.drains(system, w)) for w in WORKER_COUNTS
            ]
            cells += [
                ratio(self.own("jobledger", w, window), self.own(system, w, window))
                for window in ("drain", "round")
                for w in WORKER_COUNTS
            ]
            result.append(RatioRow(system, *cells))
        return result


def latency_rows(probes: Mapping[str, Sequence[pg_peers.Probe]]) -> list[LatencyRow]:
    result = []
    for system, found in probes.items():
        measures: list[tuple[str, list[float]]] = [
            ("enqueue call (sent to answered)", [p.answered - p.sent for p in found]),
            ("sent to handler start", [p.started - p.sent for p in found]),
            ("answered to handler start", [p.started - p.answered for p in found]),
        ]
        waited = [p.waited - p.sent for p in found if p.waited is not None]
        if waited:
            measures.append(("sent to wait answered", waited))
        for measure, values in measures:
            ordered = sorted(values)
            p50, p90, p99 = (
                round(1000 * support.percentile(ordered, f), 2) for f in (0.5, 0.9, 0.99)
            )
            result.append(LatencyRow(system, measure, len(values), p50, p90, p99))
    return result


ROUND_COLUMNS = (
    ("system", "{:<13}"),
    ("config", "{:<22}"),
    ("repetition", "{:>3}"),
    ("workers", "{:>7}"),
    ("jobs", "{:>6}"),
    ("accepted_s", "{:>10}"),
    ("accepted_per_s", "{:>14}"),
    ("leasable_s", "{:>10}"),
    ("leasable_per_s", "{:>14}"),
    ("startup_s", "{:>9}"),
    ("drain_s", "{:>7}"),
    ("drain_per_s", "{:>11}"),
    ("quiet_s", "{:>7}"),
)
CPU_COLUMNS = (
    ("system", "{:<13}"),
    ("config", "{:<22}"),
    ("repetition", "{:>3}"),
    ("workers", "{:>7}"),
    ("window", "{:<6}"),
    ("seconds", "{:>7}"),
    ("api", "{:>6}"),
    ("projector", "{:>9}"),
    ("scheduler", "{:>9}"),
    ("worker", "{:>6}"),
    ("postgres", "{:>8}"),
    ("redis", "{:>6}"),
    ("own", "{:>6}"),
    ("client", "{:>6}"),
    ("machine_pct", "{:>11}"),
    ("other_pct", "{:>9}"),
)
CONFIG_COLUMNS = (
    ("system", "{:<13}"),
    ("config", "{:<22}"),
    ("drain_1_per_s", "{:>13}"),
    ("drain_2_per_s", "{:>13}"),
    ("best_for", "{}"),
)
RATE_COLUMNS = (
    ("system", "{:<13}"),
    ("config", "{:<41}"),
    ("accepted_per_s", "{:<24}"),
    ("leasable_per_s", "{:<24}"),
    ("drain_1_per_s", "{:<21}"),
    ("drain_2_per_s", "{:<21}"),
    ("keeps", "{}"),
)
CPU_SUMMARY_COLUMNS = (
    ("system", "{:<13}"),
    ("drain_1", "{:<21}"),
    ("drain_2", "{:<21}"),
    ("round_1", "{:<21}"),
    ("round_2", "{:<21}"),
    ("client_round_1", "{}"),
)
RATIO_COLUMNS = (
    ("system", "{:<13}"),
    ("drain_x_1", "{:<17}"),
    ("drain_x_2", "{:<17}"),
    ("cpu_drain_x_1", "{:<17}"),
    ("cpu_drain_x_2", "{:<17}"),
    ("cpu_round_x_1", "{:<17}"),
    ("cpu_round_x_2", "{}"),
)
LATENCY_COLUMNS = (
    ("system", "{:<10}"),
    ("measure", "{:<32}"),
    ("samples", "{:>7}"),
    ("p50_ms", "{:>8}"),
    ("p90_ms", "{:>8}"),
    ("p99_ms", "{:>8}"),
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
        " time; the summaries give the median and the spread (default 1)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"jobledger: batch requests in flight at once (default {DEFAULT_CONCURRENCY})",
    )
    parser.add_argument(
        "--samples",
        type=int,
        help=f"start latency: jobs one at a time (default {DEFAULT_SAMPLES}, 0: none)",
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
    if args.repeat < 1 or args.concurrency < 1:
        parser.error("--repeat and --concurrency must be 1 or more")
    if args.samples is None:
        args.samples = QUICK_SAMPLES if args.quick else DEFAULT_SAMPLES
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
    probes: dict[str, list[pg_peers.Probe]] = field(default_factory=dict)  # start latency
    idle: dict[str, float] = field(default_factory=dict)  # jobledger's roles, % of a core


def settings(size: Sizes, concurrency: int) -> dict[str, str]:
    """How each system runs here, for the notes and the JSON."""
    slots = size.slots
    return {
        "jobledger": (
            "api, projector, scheduler as processes, production mode, metrics ports on,"
            f" JOBLEDGER_API_RUNS_PER_MINUTE={RUNS_PER_MINUTE:,}; {slots} slots per worker;"
            f" enqueue by the async client's enqueue_many, {MAX_BATCH_RUNS:,} runs a request,"
            f" {concurrency} requests in flight; no ANALYZE"
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
        deployment = Deployment(url, redis_url, size, processes)
        try:
            for repetition in range(1, args.repeat + 1):
                if args.repeat > 1:
                    support.log(f"repetition {repetition}/{args.repeat}")
                spy = spy_binary if repetition == 1 else None
                for system in args.systems:
                    if system in results.skipped:
                        continue
                    if system == "jobledger":
                        run_jobledger(args, stores, deployment, spy=spy, results=results)
                    else:
                        run_other(system, args, stores, processes, results)
        finally:
            deployment.stop()
            processes.close()
    return results


def run_jobledger(
    args: argparse.Namespace,
    stores: Stores,
    deployment: Deployment,
    *,
    spy: str | None,
    results: Results,
) -> None:
    """One repetition of jobledger's rounds; its start latency the first time."""
    if not deployment.running:
        deployment.start()
        support.log(f"jobledger: the roles serve, the API at {deployment.api_url}")
        results.idle = deployment.idle
    roles = ("workers", "projector") if spy else ()
    spies = [Spy(spy or "", deployment.processes.folder, role) for role in roles]
    samples = 0 if "jobledger" in results.probes else args.samples
    run = JobledgerRun(deployment, stores.size, args.concurrency, spies)
    repetition = 1 + len({r.repetition for r in results.outcome.rows if r.system == "jobledger"})
    outcome, probes = run.run(stores.base, repetition, samples)
    results.outcome.add(outcome)
    outcome.versions["jobledger"] = f"jobledger {jobledger_version()}"
    results.outcome.versions |= outcome.versions
    if probes:
        results.probes["jobledger"] = probes
    for one in spies:
        results.profiles[one.role] = one.profile(PROFILE_TOP)
        results.raw_profiles += [str(p) for p in one.keep(stem(args, stores.size))]


def jobledger_version() -> str:
    from importlib.metadata import version  # noqa: PLC0415 (only here)

    return version("jobledger")


def run_other(
    system: str, args: argparse.Namespace, stores: Stores, processes: Processes, results: Results
) -> None:
    """One repetition of another system's rounds, or why it cannot run here; pgqueuer's
    start latency the first time."""
    repetition = 1 + len({r.repetition for r in results.outcome.rows if r.system == system})
    part = run_peer(system, args, stores, processes, repetition)
    if isinstance(part, str):
        results.skipped[system] = part
        support.log(f"{system}: skipped, {part}")
        return
    results.outcome.add(part)
    if system == "pgqueuer" and args.samples and system not in results.probes:
        best = best_configs(part.rows).get((system, 1), "")
        config = next(c for c in pg_peers.configs(system) if c.name == best)
        python = pg_peers.interpreter(pg_peers.PGQUEUER, None)[0] or sys.executable
        run = pg_peers.PeerRun(pg_peers.PGQUEUER, python, stores.size, processes, stores.redis_pid)
        results.probes[system] = run.probe(args.admin_url, config, args.samples, SAMPLE_GAP)


def run_peer(
    system: str, args: argparse.Namespace, stores: Stores, processes: Processes, repetition: int
) -> Outcome | str:
    """The rounds of a system other than jobledger, or why it cannot run here."""
    if system in REDIS_SYSTEMS:
        if not importable(system):
            return "not installed (pip install -e '.[bench]')"
        return run_library(
            system, stores.redis_url, stores.base, stores.size, processes, repetition=repetition
        )
    python, why = pg_peers.interpreter(pg_peers.PEERS[system], args.oban_python)
    if python is None:
        return why
    return pg_peers.run_peer(
        system,
        python=python,
        admin_url=args.admin_url,
        size=stores.size,
        processes=processes,
        redis_pid=stores.redis_pid,
        repetition=repetition,
    )


def print_tables(
    results: Results, size: Sizes, notes: Mapping[str, str], how: Mapping[str, str]
) -> Figures:
    """Every table; ``how``: how each system ran (``settings``)."""
    outcome = results.outcome
    figures = Figures(outcome)
    print(
        f"{size.jobs:,} no-op jobs per round; {size.slots} slots (threads, sub-workers,"
        " queue limit) per worker process\n"
    )
    print("Rounds (accepted: every enqueue request answered; leasable: all N ready for a")
    print("worker; drain: first handler start to the last completion durable)")
    print(support.format_table(outcome.rows, ROUND_COLUMNS, show))
    configs = figures.configs()
    if configs:
        print("\nPeer configurations (median drain rates; the best is compared)")
        print(support.format_table(configs, CONFIG_COLUMNS, show))
    print(
        "\nCPU by part, ms per job (the best configurations; drain: first handler start to"
        " the last completion; round: first enqueue request to quiet; own: the parts"
        " before it; client: the sender, not in own)"
    )
    print(support.format_table(figures.cpu, CPU_COLUMNS, show))
    for row in figures.cpu:
        if row.window == "drain" and row.other_pct >= BUSY_ELSEWHERE_PCT:
            print(
                f"warning: during the {row.system} drain with {row.workers} worker(s), other"
                f" programs or the kernel used {row.other_pct:g}% of a core: its figures may be"
                " understated"
            )
    print_summaries(results, figures)
    print("\nNotes:")
    for line in notes.values():
        print(f"- {line}")
    ran = {row.system for row in outcome.rows}
    for system, text in how.items():
        if system in ran:
            version = outcome.versions.get(system)
            print(f"- {system}{f' ({version})' if version else ''}: {text}")
    for system, why in results.skipped.items():
        print(f"- {system}: skipped, {why}")
    print("\nChecks:")
    for line in outcome.checks:
        print(f"- {line}")
    return figures


def print_summaries(results: Results, figures: Figures) -> None:
    print("\nRates, jobs/s: median (min-max) over the repetitions")
    print(support.format_table(figures.rates(), RATE_COLUMNS))
    print("\nOwn CPU (system + PostgreSQL + Redis), ms per job: median (min-max)")
    print(support.format_table(figures.cpu_summary(), CPU_SUMMARY_COLUMNS))
    ratios = figures.ratios()
    if ratios:
        print(
            "\njobledger divided by each system, repetition by repetition: median (min-max);"
            " drain_x > 1: jobledger drains faster; cpu_x > 1: jobledger spends more CPU a job"
        )
        print(support.format_table(ratios, RATIO_COLUMNS))
    latency = latency_rows(results.probes)
    if latency:
        print(
            f"\nStart latency at low load: one job at a time, {SAMPLE_GAP * 1000:g} ms apart,"
            " one idle worker; 'sent' is just before the enqueue call, 'answered' as it returned"
        )
        print(support.format_table(latency, LATENCY_COLUMNS, show))


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
    after = support.load_average()
    notes = {
        "store": f"{store}; autovacuum {autovacuum} on this server",
        "machine": (
            f"{os.cpu_count()} CPUs; load average {before} before, {after} after;"
            f" run time {seconds:.0f}s"
        ),
        "code": f"jobledger code: {code}",
        "quiet": (
            "quiet: the system's processes and redis-server at most"
            f" {rounds.QUIET_PCT:g}% of a core over {rounds.QUIET_WINDOW:g}s (one 10 ms clock"
            " tick); quiet_s: from the last completion until then"
        ),
        "workers": "a worker's CPU counts from its first handler start (start-up excluded)",
    }
    if results.idle:
        shown = ", ".join(f"{name} {pct:g}%" for name, pct in results.idle.items())
        notes["idle"] = f"jobledger with nothing to do (one worker), % of a core: {shown}"
    figures = print_tables(results, size, notes, settings(size, args.concurrency))
    for role, profile in results.profiles.items():
        print()
        print(format_profile(profile, role))
    if results.raw_profiles:
        print("raw stacks (collapsed, for a flame graph): " + ", ".join(results.raw_profiles))
    document = {
        "benchmark": "throughput",
        "recorded_at": support.recorded_at(),
        "store": store,
        "autovacuum": autovacuum,
        "jobledger": code,
        **support.machine(),
        "load_average_before": before,
        "load_average_after": after,
        "jobledger_idle_pct": results.idle,
        "run_seconds": round(seconds, 1),
        "sizes": asdict(size),
        "settings": settings(size, args.concurrency),
        "versions": results.outcome.versions,
        "skipped": results.skipped,
        "rows": [asdict(row) for row in results.outcome.rows],
        "cpu": [asdict(row) for row in results.outcome.cpu],
        "best_configs": {f"{s} {w}": c for (s, w), c in figures.best.items()},
        "rates": [asdict(row) for row in figures.rates()],
        "cpu_summary": [asdict(row) for row in figures.cpu_summary()],
        "ratios": [asdict(row) for row in figures.ratios()],
        "latency": [asdict(row) for row in latency_rows(results.probes)],
        "checks": results.outcome.checks,
        "profile": {role: asdict(p) for role, p in results.profiles.items()} or None,
    }
    path = support.write_json(stem(args, size), document)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
