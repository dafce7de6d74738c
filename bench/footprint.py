"""Footprint: the resident memory (RSS) of each production role, idle and under load.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); runs ``jobledger migrate``, then the production roles
as processes of the installed ``jobledger`` command: the API, 2 schedulers, 2 workers
and the projector. Stops them all and the server, and drops the database at the end,
also on an error or Ctrl-C.

    python -m bench.footprint [--quick] [--rate R] [--seconds S] [--idle S] [--slots N]
        [--set JOBLEDGER_NAME=VALUE ...] [--admin-url URL]

Phases: idle (every role up, no job, 20 s); create (this process saves rate x seconds
one-shot ``test.echo`` jobs, due evenly over the load window that begins once they are
saved and the roles have taken them in); load (the window, 60 s at 500 jobs/s: the
leading scheduler fires the jobs, the workers run them, and a client reads pages of jobs
and executions from the API a few times a second); drain (until every job completed).

Every 0.5 s the script reads VmRSS, VmHWM and RssAnon of every role process from
``/proc/<pid>/status``. Per role: RSS when idle (median and max), its peak while the jobs
are created and under load, VmHWM (the lifetime peak) at the end, and CPU from
``/proc/<pid>/stat``; per process also the most of its RSS that was its own memory. From
the log: fires and completions in the window, their lateness, and whether every job
fired once and its execution completed once.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg import sql

from bench import _rounds as rounds
from bench import _support as support
from jobledger.adapters.store import events_table
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution
from jobledger.domain.job import Job
from jobledger.domain.schedules import OneShotSchedule
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from uuid import UUID

    from jobledger.persistence.ledger import Ledger

ROLES = (("api", 1), ("scheduler", 2), ("worker", 2), ("projector", 1))
TARGET_MIB = 150.0  # per scheduler or worker process, lifetime peak
TARGET_ROLES = frozenset({"scheduler", "worker"})
PREFIX = "bench-fp"  # jobledger's Redis key prefix
ADMIN = "admin"
PASSWORD = "Footprint-Ledger-5827-q"  # noqa: S105 (a throwaway account on a throwaway database)
QUEUE = "default"
SPEC = ExecutionSpec(handler="test.echo", queue=QUEUE)
DEFAULT_RATE = 500.0
DEFAULT_SECONDS = 60.0
DEFAULT_IDLE = 20.0
QUICK_SECONDS = 10.0
QUICK_IDLE = 5.0
DEFAULT_SLOTS = 32
SAMPLE_EVERY = 0.5  # seconds between two reads of every process's /proc status
PROGRESS_EVERY = 5.0
SAVE_CHUNK = 500  # jobs per transaction while creating them
# The window begins at least this long after the last save, so that the projector and
# the scheduler's job index have taken the new jobs in before the first one is due.
SETTLE = 5.0
CREATE_PER_S = 2000.0  # a cautious saving rate, to place the window before saving
START_TIMEOUT = 60.0
STALL = 30.0  # seconds without a completion that end the drain
API_READS_PER_S = 4.0
API_PATHS = ("/api/v1/jobs?limit=50", "/api/v1/executions?limit=50")
REQUEST_TIMEOUT = 30.0
KEPT_UP_SHARE = 0.95  # of the jobs due in the window, completed in the window
KEPT_UP_LATE_S = 5.0  # p99 from due to completed
BUSY_ELSEWHERE_PCT = 25.0  # other programs' CPU in the window that makes the rates suspect
MIB = 1024.0  # /proc reports kB, which are KiB

FIRED = Job.Fired.TOPIC
MISSED = Job.FiresMissed.TOPIC
ENQUEUED = Execution.Enqueued.TOPIC
LEASED = Execution.Leased.TOPIC
COMPLETED = Execution.Completed.TOPIC


@dataclass(frozen=True)
class Plan:
    rate: float  # jobs due per second of the window
    seconds: float  # the load window
    idle: float
    slots: int  # per worker
    settings: tuple[tuple[str, str], ...] = ()  # more JOBLEDGER_* variables for every role

    @property
    def jobs(self) -> int:
        return round(self.rate * self.seconds)


# ---- the role processes ----------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One process of a role: ``scheduler-1`` of ``scheduler``."""

    name: str
    role: str
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int  # its metrics port, or the API's port

    @property
    def pid(self) -> int:
        return self.process.pid


def jobledger_command() -> str:
    """The installed console script next to this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "jobledger"
    found = str(beside) if beside.exists() else shutil.which("jobledger")
    if found is None:
        raise RuntimeError("the jobledger command is not installed (run make setup)")
    return found


def base_env(url: str, redis_url: str, plan: Plan) -> dict[str, str]:
    """This environment without jobledger's variables, plus what every role shares."""
    dropped = {"ADMIN_USERNAME", "ADMIN_PASSWORD"}
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_") and k not in dropped
    }
    env.update(
        JOBLEDGER_DATABASE_URL=url,
        JOBLEDGER_REDIS_URL=redis_url,
        JOBLEDGER_REDIS_PREFIX=PREFIX,
        JOBLEDGER_LOG_FORMAT="json",
        JOBLEDGER_TEST_HANDLERS="true",
        JOBLEDGER_WORKER_SLOTS=str(plan.slots),
        JOBLEDGER_WORKER_QUEUES=QUEUE,
    )
    env.update(plan.settings)
    return env


def run_migrate(command: str, env: Mapping[str, str], folder: Path) -> None:
    result = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
        [command, "migrate"], env=dict(env), cwd=folder, capture_output=True, check=False
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace")
        raise RuntimeError(f"jobledger migrate exited with {result.returncode}:\n{output}")
    support.log("jobledger migrate: done")


class Fleet:
    """The role processes, each in a session of its own (Ctrl-C reaches only this script,
    which then stops them) with its output in a log file."""

    def __init__(self, command: str, folder: Path, env: Mapping[str, str]) -> None:
        self._command = command
        self._folder = folder
        self._env = env
        self.members: list[Member] = []  # kept after they stop, for the report
        self._running: list[Member] = []

    def start_all(self) -> None:
        for role, count in ROLES:
            for number in range(1, count + 1):
                self._start(role, f"{role}-{number}" if count > 1 else role)
        support.log("started " + ", ".join(f"{m.name} (pid {m.pid})" for m in self.members))

    def _start(self, role: str, name: str) -> None:
        port = support.free_port()
        env = dict(self._env)
        if role == "api":
            env.update(JOBLEDGER_API_PORT=str(port), JOBLEDGER_ADMIN_USERNAME=ADMIN)
            env["JOBLEDGER_ADMIN_PASSWORD"] = PASSWORD
        else:
            env["JOBLEDGER_METRICS_PORT"] = str(port)
        log_path = self._folder / f"{name}.log"
        with log_path.open("ab") as output:
            process = subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
                [self._command, role],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._folder,
                start_new_session=True,
            )
        member = Member(name, role, process, log_path, port)
        self.members.append(member)
        self._running.append(member)

    def of(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role]

    def check(self) -> None:
        """Raise if a role process has exited, with the end of its log."""
        for member in self.members:
            if member.process.poll() is not None:
                raise RuntimeError(
                    f"{member.name} exited with {member.process.returncode}; the end of its"
                    f" log:\n{support.tail(member.log_path)}"
                )

    def close(self) -> None:
        # Each process once: a second SIGKILL to the group of a pid long reaped could
        # reach a process that reuses that number.
        while self._running:
            support.stop_group(self._running.pop().process)


def interpreters(fleet: Fleet) -> str:
    """What each started pid runs: the console script must have exec'd Python itself, with
    no wrapper process between it and this script, and no child of its own."""
    seen = []
    for member in fleet.members:
        executable = Path(f"/proc/{member.pid}/exe").readlink().name
        children = len(support.process_tree(member.pid)) - 1
        if not executable.startswith("python") or children:
            raise RuntimeError(
                f"{member.name} (pid {member.pid}) runs {executable} with {children} child"
                " process(es): its memory would not be that of the role's Python process"
            )
        seen.append(executable)
    return ", ".join(sorted(set(seen)))


def problems(member: Member) -> list[str]:
    """Log lines at warning level or above (JSON lines; other lines as they are)."""
    found = []
    text = member.log_path.read_text(encoding="utf-8", errors="replace")
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            found.append(line)
            continue
        level = str(entry.get("level", "")).lower() if isinstance(entry, dict) else ""
        if level not in {"debug", "info"}:
            found.append(line)
    return found


# ---- readiness and the API client ------------------------------------------------------


def metrics_text(port: int) -> str | None:
    """What a role serves on its metrics port; None while it does not answer 200."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2.0)
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


def leads(member: Member) -> bool:
    """Whether a scheduler reports ``jobledger_leader 1`` (refreshed once a second)."""
    text = metrics_text(member.port) or ""
    return any(
        line.split()[1:] == ["1.0"]
        for line in text.splitlines()
        if line.startswith("jobledger_leader ")
    )


def wait_until_up(fleet: Fleet) -> float:
    """Until /ready answers 200, every metrics port answers and a scheduler leads;
    returns the seconds it took."""
    begun = time.perf_counter()
    api = fleet.of("api")[0]
    others = [m for m in fleet.members if m.role != "api"]

    def up() -> bool:
        fleet.check()
        try:
            ready = httpx.get(f"http://127.0.0.1:{api.port}/ready", timeout=2.0)
        except httpx.HTTPError:
            return False
        answering = all(metrics_text(m.port) is not None for m in others)
        leading = any(leads(m) for m in fleet.of("scheduler"))
        return ready.status_code == 200 and answering and leading

    support.wait_for(up, START_TIMEOUT, "every role answering and a leader elected", poll=0.25)
    return time.perf_counter() - begun


def sign_in(base_url: str) -> str:
    """Log in as the admin (cookie and CSRF token), create a viewer API token; its secret."""
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT) as client:
        login = client.post("/api/v1/auth/login", json={"username": ADMIN, "password": PASSWORD})
        expect(login, "login")
        created = client.post(
            "/api/v1/tokens",
            json={"name": "footprint", "role": "viewer"},
            headers={"X-CSRF-Token": str(login.json()["csrf_token"])},
        )
        expect(created, "creating a token")
        return str(created.json()["secret"])


def expect(response: httpx.Response, what: str) -> None:
    if not response.is_success:
        raise RuntimeError(f"{what}: HTTP {response.status_code}: {response.text[:300]}")


def wait_for_workers(base_url: str, token: str, count: int) -> None:
    """Until the API lists ``count`` live workers (their presence heartbeats)."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=REQUEST_TIMEOUT) as client:

        def live() -> bool:
            response = client.get("/api/v1/workers")
            expect(response, "GET /api/v1/workers")
            return len(response.json()) >= count

        support.wait_for(live, START_TIMEOUT, f"{count} live workers", poll=0.25)


class ApiReader:
    """Keeps the API lightly busy: a page of jobs or executions, API_READS_PER_S times
    a second, with a Bearer token, from a thread of its own."""

    def __init__(self, base_url: str, token: str) -> None:
        self._client = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0
        )
        self.statuses: collections.Counter[int] = collections.Counter()
        self.latencies_ms: list[float] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-api-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(REQUEST_TIMEOUT)
        self._client.close()

    def _run(self) -> None:
        index = 0
        while not self._stopping.wait(1.0 / API_READS_PER_S):
            begun = time.perf_counter()
            try:
                status = self._client.get(API_PATHS[index % len(API_PATHS)]).status_code
            except httpx.HTTPError:
                status = 0  # a transport error
            self.latencies_ms.append((time.perf_counter() - begun) * 1000)
            self.statuses[status] += 1
            index += 1

    def summary(self) -> dict[str, object]:
        ordered = sorted(self.latencies_ms)
        return {
            "requests": len(ordered),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "p50_ms": round(support.percentile(ordered, 0.50), 1),
            "p99_ms": round(support.percentile(ordered, 0.99), 1),
        }


# ---- sampling /proc --------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """Of one process, in KiB: resident, its lifetime peak, and the private part of it
    (the rest is files mapped in: the interpreter and the libraries, shared by all)."""

    rss: int
    hwm: int
    anon: int


def read_memory(pid: int) -> Memory | None:
    """VmRSS, VmHWM and RssAnon from /proc/<pid>/status; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in {"VmRSS", "VmHWM", "RssAnon"}:
            values[key] = int(rest.split()[0])
    if len(values) < 3:  # a zombie has none of them
        return None
    return Memory(values["VmRSS"], values["VmHWM"], values["RssAnon"])


@dataclass
class Trace:
    """What the sampler saw of one process."""

    rss_kib: dict[str, list[int]] = field(default_factory=dict)  # by phase
    series: list[tuple[float, int]] = field(default_factory=list)  # (seconds, KiB)
    hwm_kib: int = 0
    anon_kib: int = 0  # the most RssAnon seen
    most_processes: int = 1  # the process and its descendants, at the phase marks


@dataclass(frozen=True)
class Mark:
    """A phase boundary: when, and the CPU seconds of every process and the machine."""

    at: float
    cpu: dict[str, float]


class Sampler:
    """Reads every role process's memory from /proc every SAMPLE_EVERY seconds, into the
    phase the main thread has set; notes the CPU time at each phase boundary."""

    def __init__(
        self, members: Sequence[Member], groups: Mapping[str, Callable[[], list[int]]]
    ) -> None:
        self._members = members
        self._groups = groups  # other CPU users: PostgreSQL, redis-server, this script
        self._begun = time.perf_counter()
        self.phase = "start"
        self.traces = {m.name: Trace() for m in members}
        self.marks: dict[str, Mark] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            at = round(time.perf_counter() - self._begun, 2)
            for member in self._members:
                memory = read_memory(member.pid)
                if memory is None:
                    continue
                trace = self.traces[member.name]
                trace.rss_kib.setdefault(self.phase, []).append(memory.rss)
                trace.series.append((at, memory.rss))
                trace.hwm_kib = max(trace.hwm_kib, memory.hwm)
                trace.anon_kib = max(trace.anon_kib, memory.anon)

    def enter(self, phase: str) -> None:
        """Begin ``phase``: a sample closes the last one, then the CPU times are noted."""
        self.sample()
        cpu = {m.name: support.cpu_seconds([m.pid]) for m in self._members}
        cpu |= {name: support.cpu_seconds(pids()) for name, pids in self._groups.items()}
        cpu["machine"] = support.machine_cpu_seconds()
        with self._lock:
            self.phase = phase
            self.marks[phase] = Mark(time.perf_counter(), cpu)
            for member in self._members:
                trace = self.traces[member.name]
                tree = len(support.process_tree(member.pid))
                trace.most_processes = max(trace.most_processes, tree)

    def cpu_pct(self, name: str, first: str, last: str) -> float | None:
        """CPU of ``name`` between two marks, in % of one core."""
        begin, end = self.marks.get(first), self.marks.get(last)
        if begin is None or end is None or end.at <= begin.at:
            return None
        return round(100 * (end.cpu[name] - begin.cpu[name]) / (end.at - begin.at), 1)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)


def cpu_groups(database: str, redis_url: str) -> dict[str, Callable[[], list[int]]]:
    """PostgreSQL's own processes and the sessions of the benchmark's database (not those
    of other databases), the private redis-server, and this script."""
    return rounds.base_groups(database, support.redis_server_pid(redis_url))


# ---- the jobs and the log --------------------------------------------------------------


def create_jobs(ledger: Ledger, plan: Plan, start: datetime) -> None:
    """``plan.jobs`` one-shot jobs, due evenly over the window from ``start``, saved
    SAVE_CHUNK to a transaction."""
    now = datetime.now(UTC)
    step = timedelta(seconds=1.0 / plan.rate)
    for begin in range(0, plan.jobs, SAVE_CHUNK):
        jobs = [
            Job.schedule(
                JobDefinition(
                    name=f"footprint {i}", spec=SPEC, schedule=OneShotSchedule(start + i * step)
                ),
                at=now,
                by="bench",
                limits=ledger.limits,
            )
            for i in range(begin, min(begin + SAVE_CHUNK, plan.jobs))
        ]
        ledger.save_all(*jobs)
        done = begin + len(jobs)
        if done % 5000 < SAVE_CHUNK or done == plan.jobs:
            support.log(f"creating jobs {done:,}/{plan.jobs:,}")


class LogCounter:
    """Counts ``JobFired`` and ``ExecutionCompleted`` events in the log, reading only the
    rows added since the last count."""

    def __init__(self, url: str, table: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._table = sql.Identifier(table)
        self._position = 0
        self.fired = 0
        self.completed = 0

    def poll(self) -> tuple[int, int]:
        query = sql.SQL(
            "SELECT count(*) FILTER (WHERE topic = %s), count(*) FILTER (WHERE topic = %s),"
            " coalesce(max(notification_id), 0) FROM {} WHERE notification_id > %s"
        ).format(self._table)
        row = self._conn.execute(query, (FIRED, COMPLETED, self._position)).fetchone()
        if row is not None and row[2]:
            self.fired += int(row[0])
            self.completed += int(row[1])
            self._position = int(row[2])
        return self.fired, self.completed

    def topics(self) -> dict[str, tuple[int, int]]:
        """(events, distinct aggregates) per topic over the whole log."""
        query = sql.SQL(
            "SELECT topic, count(*), count(DISTINCT originator_id) FROM {} GROUP BY topic"
        ).format(self._table)
        rows = self._conn.execute(query).fetchall()
        return {str(topic): (int(count), int(distinct)) for topic, count, distinct in rows}

    def events(self, ledger: Ledger, topic: str) -> list[object]:
        query = sql.SQL(
            "SELECT originator_id, originator_version, topic, state FROM {} WHERE topic = %s"
        ).format(self._table)
        rows = self._conn.execute(query, (topic,)).fetchall()
        return [ledger.mapper.to_domain_event(StoredEvent(*row)) for row in rows]

    def close(self) -> None:
        self._conn.close()


# ---- the run ---------------------------------------------------------------------------


@dataclass
class Timeline:
    """When the load window was, and what happened outside the memory samples."""

    start: datetime
    seconds: float
    startup_s: float = 0.0
    create_s: float = 0.0
    drain_s: float = 0.0
    leader: str = ""
    api: dict[str, object] = field(default_factory=dict)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds)


class Session:
    """The phases of a run, on started roles, a sampler and a counter of the log."""

    def __init__(self, plan: Plan, fleet: Fleet, container: Container, counter: LogCounter) -> None:
        self.plan = plan
        self.fleet = fleet
        self.container = container
        self.counter = counter

    def idle(self, sampler: Sampler) -> None:
        sampler.enter("idle")
        support.log(f"idle for {self.plan.idle:g} s, no jobs")
        self._sleep(self.plan.idle, "idle")

    def create(self, sampler: Sampler) -> Timeline:
        """Save the jobs, due over a window that begins once they are in."""
        sampler.enter("create")
        lead = SETTLE + self.plan.jobs / CREATE_PER_S
        start = datetime.now(UTC) + timedelta(seconds=lead)
        begun = time.perf_counter()
        create_jobs(self.container.ledger, self.plan, start)
        timeline = Timeline(start, self.plan.seconds, create_s=time.perf_counter() - begun)
        margin = (start - datetime.now(UTC)).total_seconds()
        if margin < 1.0:
            raise RuntimeError(f"creating {self.plan.jobs:,} jobs took longer than {lead:.0f} s")
        support.log(
            f"{self.plan.jobs:,} jobs saved in {timeline.create_s:.1f} s; the load window"
            f" begins in {margin:.1f} s, at {start:%H:%M:%S}"
        )
        sampler.enter("settle")
        self._sleep(margin, "settle")
        return timeline

    def load(self, sampler: Sampler, timeline: Timeline) -> None:
        # No job is due before the window: the counts from the start of the log are the
        # window's.
        sampler.enter("load")
        begun = shown = time.perf_counter()
        while (elapsed := time.perf_counter() - begun) < self.plan.seconds:
            time.sleep(min(0.25, self.plan.seconds - elapsed))
            self.fleet.check()
            if time.perf_counter() - shown >= PROGRESS_EVERY:
                shown = time.perf_counter()
                fired, completed = self.counter.poll()
                support.log(
                    f"load {shown - begun:.0f}/{self.plan.seconds:g} s: fired {fired:,}"
                    f" completed {completed:,}"
                )
        timeline.leader = self._leader()

    def drain(self, sampler: Sampler, timeline: Timeline) -> None:
        """Until every job completed, or no completion came for STALL seconds."""
        sampler.enter("drain")
        begun = last_change = shown = time.perf_counter()
        jobs, seen = self.plan.jobs, -1
        while True:
            self.fleet.check()
            fired, completed = self.counter.poll()
            now = time.perf_counter()
            if completed != seen:
                seen, last_change = completed, now
            if completed >= jobs or now - last_change > STALL or now - shown >= PROGRESS_EVERY:
                shown = now
                support.log(
                    f"drain {now - begun:.1f} s: fired {fired:,}/{jobs:,},"
                    f" completed {completed:,}/{jobs:,}"
                )
            if completed >= jobs or now - last_change > STALL:
                break
            time.sleep(0.25)
        timeline.drain_s = time.perf_counter() - begun
        time.sleep(2 * SAMPLE_EVERY)  # the roles settle into their after-load size
        sampler.enter("end")

    def _leader(self) -> str:
        return next((m.name for m in self.fleet.of("scheduler") if leads(m)), "")

    def _sleep(self, seconds: float, label: str) -> None:
        deadline = time.perf_counter() + seconds
        shown = time.perf_counter()
        while (left := deadline - time.perf_counter()) > 0:
            time.sleep(min(0.25, left))
            self.fleet.check()
            if time.perf_counter() - shown >= PROGRESS_EVERY and left > 1:
                shown = time.perf_counter()
                support.log(f"{label}: {max(left, 0):.0f} s left")


# ---- what the log says -----------------------------------------------------------------


@dataclass(frozen=True)
class LoadRow:
    measure: str
    count: int
    per_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    note: str = ""


@dataclass
class Audit:
    rows: list[LoadRow]
    problems: list[str]  # failed checks: a job not fired once, a run not completed once
    notes: list[str]  # what else the log holds
    topics: dict[str, int]
    sustained: bool
    completed_per_s: float


@dataclass
class Run:
    """One execution of a fired job, by its events."""

    scheduled_for: datetime
    fired_at: datetime  # the JobFired event's timestamp
    completed_at: list[datetime] = field(default_factory=list)


def read_runs(counter: LogCounter, ledger: Ledger) -> tuple[dict[UUID, Run], list[UUID]]:
    """The executions the jobs fired, by execution id, with their completions; and the
    ids of completed executions that no job fired."""
    runs: dict[UUID, Run] = {}
    for event in counter.events(ledger, FIRED):
        if isinstance(event, Job.Fired):
            runs[event.execution_id] = Run(event.scheduled_for, event.timestamp)
    strays = []
    for event in counter.events(ledger, COMPLETED):
        if not isinstance(event, Execution.Completed):
            continue
        run = runs.get(event.originator_id)
        if run is None:
            strays.append(event.originator_id)
        else:
            run.completed_at.append(event.timestamp)
    return runs, strays


def exactly_once(
    topics: Mapping[str, tuple[int, int]],
    runs: Mapping[UUID, Run],
    strays: Sequence[UUID],
    jobs: int,
) -> list[str]:
    """Every job fired once, and each of its executions completed once; else what not."""
    found = []
    for topic, what in ((FIRED, "JobFired"), (ENQUEUED, "ExecutionEnqueued")):
        count, distinct = topics.get(topic, (0, 0))
        if (count, distinct) != (jobs, jobs):
            found.append(f"{count:,} {what} events for {distinct:,} aggregates, expected {jobs:,}")
    if MISSED in topics:
        found.append(f"{topics[MISSED][0]:,} JobFiresMissed events")
    not_once = sum(1 for run in runs.values() if len(run.completed_at) != 1)
    if not_once:
        found.append(f"{not_once:,} executions without exactly one ExecutionCompleted")
    if strays:
        found.append(f"{len(strays):,} completions of executions no job fired")
    return found


def ms_stats(values: Sequence[timedelta]) -> tuple[float | None, float | None, float | None]:
    ordered = sorted(v.total_seconds() * 1000 for v in values)
    if not ordered:
        return None, None, None
    p50, p99 = support.percentile(ordered, 0.50), support.percentile(ordered, 0.99)
    return round(p50, 1), round(p99, 1), round(ordered[-1], 1)


def load_rows(runs: Mapping[UUID, Run], timeline: Timeline, plan: Plan) -> list[LoadRow]:
    start, end, seconds = timeline.start, timeline.end, timeline.seconds
    fired = [run.fired_at for run in runs.values()]
    done = [(run, at) for run in runs.values() for at in run.completed_at]
    fired_in = sum(1 for at in fired if start <= at <= end)
    done_in = sum(1 for _, at in done if start <= at <= end)
    last = max((at for _, at in done), default=None)
    span = (last - start).total_seconds() if last is not None else None
    return [
        LoadRow("due in the window", plan.jobs, plan.rate, None, None, None, "one-shot jobs"),
        LoadRow(
            "fired in the window",
            fired_in,
            round(fired_in / seconds, 1),
            *ms_stats([run.fired_at - run.scheduled_for for run in runs.values()]),
            "lateness: due -> JobFired",
        ),
        LoadRow(
            "completed in the window",
            done_in,
            round(done_in / seconds, 1),
            *ms_stats([at - run.scheduled_for for run, at in done]),
            "lateness: due -> ExecutionCompleted",
        ),
        LoadRow(
            "completed in all",
            len(done),
            round(len(done) / span, 1) if span else None,
            None,
            None,
            None,
            f"the last {span:.1f} s after the window began" if span is not None else "none",
        ),
    ]


def audit_log(counter: LogCounter, ledger: Ledger, timeline: Timeline, plan: Plan) -> Audit:
    topics = counter.topics()
    runs, strays = read_runs(counter, ledger)
    rows = load_rows(runs, timeline, plan)
    found = exactly_once(topics, runs, strays, plan.jobs)
    leased = topics.get(LEASED, (0, 0))[0]
    usual = {"jobledger:JobScheduled", FIRED, ENQUEUED, LEASED, COMPLETED}
    notes = [f"{leased - plan.jobs:,} extra leases"] if leased != plan.jobs else []
    notes += [f"{count:,} {topic}" for topic, (count, _) in topics.items() if topic not in usual]
    completed = rows[2]
    sustained = (
        not found
        and completed.count >= KEPT_UP_SHARE * plan.jobs
        and completed.p99_ms is not None
        and completed.p99_ms <= KEPT_UP_LATE_S * 1000
    )
    return Audit(
        rows,
        found,
        notes,
        {topic: count for topic, (count, _) in sorted(topics.items())},
        sustained,
        completed.per_s or 0.0,
    )


# ---- measuring -------------------------------------------------------------------------


@dataclass
class Observed:
    members: list[Member]
    traces: dict[str, Trace]
    sampler: Sampler
    timeline: Timeline
    audit: Audit
    warnings: dict[str, list[str]]


def bring_up(fleet: Fleet) -> tuple[float, str, str]:
    """Until every role answers; then a Bearer token, and both workers seen live. Returns
    the seconds to the first, the API's URL and the token."""
    startup_s = wait_until_up(fleet)
    support.log(
        f"every role is up after {startup_s:.1f} s; each pid is {interpreters(fleet)},"
        " with no child process"
    )
    api_url = f"http://127.0.0.1:{fleet.of('api')[0].port}"
    token = sign_in(api_url)
    wait_for_workers(api_url, token, len(fleet.of("worker")))
    return startup_s, api_url, token


def measure(plan: Plan, url: str, redis_url: str, folder: Path) -> Observed:
    command = jobledger_command()
    env = base_env(url, redis_url, plan)
    run_migrate(command, env, folder)
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=url,
        redis_url=redis_url,
        redis_prefix=PREFIX,
        log_level="warning",
    )
    configure_logging(settings)
    fleet = Fleet(command, folder, env)
    with contextlib.ExitStack() as stack:
        stack.callback(fleet.close)
        fleet.start_all()
        sampler = Sampler(fleet.members, cpu_groups(url.rpartition("/")[2], redis_url))
        stack.callback(sampler.stop)
        startup_s, api_url, token = bring_up(fleet)
        container = stack.enter_context(bootstrap(settings))
        counter = LogCounter(url, events_table(settings))
        stack.callback(counter.close)
        session = Session(plan, fleet, container, counter)
        session.idle(sampler)
        reader = ApiReader(api_url, token)
        reader.start()
        stack.callback(reader.stop)
        timeline = session.create(sampler)
        timeline.startup_s = startup_s
        session.load(sampler, timeline)
        session.drain(sampler, timeline)
        reader.stop()
        timeline.api = reader.summary()
        warnings = {m.name: problems(m) for m in fleet.members}
        fleet.close()
        sampler.stop()
        audit = audit_log(counter, container.ledger, timeline, plan)
    return Observed(fleet.members, sampler.traces, sampler, timeline, audit, warnings)


# ---- the tables ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessRow:
    process: str
    pid: int
    idle_med_mib: float | None
    idle_max_mib: float | None
    create_max_mib: float | None
    load_peak_mib: float | None
    hwm_mib: float | None
    anon_mib: float | None  # the most of its RSS that was its own, not mapped files
    idle_cpu_pct: float | None
    load_cpu_pct: float | None
    note: str = ""


@dataclass(frozen=True)
class RoleRow:
    role: str
    pids: int
    idle_med_mib: float | None
    idle_max_mib: float | None
    create_max_mib: float | None
    load_peak_mib: float | None
    hwm_mib: float | None
    load_cpu_pct: float | None  # all its processes together
    within_target: bool | None


def mib(kib: float | None) -> float | None:
    return None if kib is None else round(kib / MIB, 1)


def peak(trace: Trace, *phases: str) -> float | None:
    values = [v for phase in phases for v in trace.rss_kib.get(phase, [])]
    return mib(max(values)) if values else None


def process_row(member: Member, observed: Observed) -> ProcessRow:
    trace = observed.traces[member.name]
    idle = trace.rss_kib.get("idle", [])
    notes = []
    if member.role == "scheduler":
        notes.append("leader" if observed.timeline.leader == member.name else "standby")
    if trace.most_processes > 1:
        notes.append(f"{trace.most_processes} processes in its tree: only the first is counted")
    return ProcessRow(
        member.name,
        member.pid,
        mib(statistics.median(idle)) if idle else None,
        peak(trace, "idle"),
        peak(trace, "create", "settle"),
        peak(trace, "load", "drain"),
        mib(trace.hwm_kib) if trace.hwm_kib else None,
        mib(trace.anon_kib) if trace.anon_kib else None,
        observed.sampler.cpu_pct(member.name, "idle", "create"),
        observed.sampler.cpu_pct(member.name, "load", "drain"),
        ", ".join(notes),
    )


def role_rows(rows: Sequence[ProcessRow], members: Sequence[Member]) -> list[RoleRow]:
    """Per role, the largest of its processes; CPU added up."""
    result = []
    for role, _ in ROLES:
        names = {m.name for m in members if m.role == role}
        mine = [row for row in rows if row.process in names]

        def most(column: str, mine: Sequence[ProcessRow] = mine) -> float | None:
            values = [v for row in mine if (v := getattr(row, column)) is not None]
            return max(values) if values else None

        cpu = [row.load_cpu_pct for row in mine if row.load_cpu_pct is not None]
        hwm = most("hwm_mib")
        within = None if role not in TARGET_ROLES or hwm is None else hwm < TARGET_MIB
        result.append(
            RoleRow(
                role,
                len(mine),
                most("idle_med_mib"),
                most("idle_max_mib"),
                most("create_max_mib"),
                most("load_peak_mib"),
                hwm,
                round(sum(cpu), 1) if cpu else None,
                within,
            )
        )
    return result


def machine_during_load(observed: Observed) -> dict[str, float | None]:
    """CPU in % of one core over the load window: the roles, the services, the rest."""
    sampler = observed.sampler
    parts: dict[str, float | None] = {
        "roles": round(
            sum(sampler.cpu_pct(m.name, "load", "drain") or 0.0 for m in observed.members), 1
        )
    }
    for name in ("postgres", "redis", "bench", "machine"):
        parts[name] = sampler.cpu_pct(name, "load", "drain")
    known = sum(v or 0.0 for k, v in parts.items() if k != "machine")
    parts["other"] = round(max(0.0, (parts["machine"] or 0.0) - known), 1)
    return parts


ROLE_COLUMNS = (
    ("role", "{:<10}"),
    ("pids", "{:>4}"),
    ("idle_med_mib", "{:>12}"),
    ("idle_max_mib", "{:>12}"),
    ("create_max_mib", "{:>14}"),
    ("load_peak_mib", "{:>13}"),
    ("hwm_mib", "{:>7}"),
    ("load_cpu_pct", "{:>12}"),
    ("within_target", "{:<13}"),
)
PROCESS_COLUMNS = (
    ("process", "{:<11}"),
    ("pid", "{:>7}"),
    ("idle_med_mib", "{:>12}"),
    ("idle_max_mib", "{:>12}"),
    ("create_max_mib", "{:>14}"),
    ("load_peak_mib", "{:>13}"),
    ("hwm_mib", "{:>7}"),
    ("anon_mib", "{:>8}"),
    ("idle_cpu_pct", "{:>12}"),
    ("load_cpu_pct", "{:>12}"),
    ("note", "{}"),
)
LOAD_COLUMNS = (
    ("measure", "{:<23}"),
    ("count", "{:>6}"),
    ("per_s", "{:>7}"),
    ("p50_ms", "{:>8}"),
    ("p99_ms", "{:>8}"),
    ("max_ms", "{:>8}"),
    ("note", "{}"),
)


def show(value: object) -> str:
    """As ``support.show``, with one decimal for floats (MiB, %)."""
    if isinstance(value, float):
        return f"{value:.1f}"
    return support.show(value)


def summary_lines(observed: Observed, plan: Plan) -> list[str]:
    audit, timeline = observed.audit, observed.timeline
    verdict = "yes" if audit.sustained else "no"
    once = "; ".join(audit.problems) or "every job fired once, every execution completed once"
    lines = [
        (
            f"{plan.rate:g} jobs/s sustained: {verdict} (completed {audit.completed_per_s:g}/s"
            f" in the window; drain after it {timeline.drain_s:.1f} s)"
        ),
        f"exactly once: {once}",
    ]
    if audit.notes:
        lines.append("also in the log: " + ", ".join(audit.notes))
    cpu = machine_during_load(observed)
    lines.append(
        "CPU in the load window, % of one core: "
        + ", ".join(f"{name} {show(value)}" for name, value in cpu.items())
        + f" (the machine has {os.cpu_count()} cores)"
    )
    if (cpu["other"] or 0.0) >= BUSY_ELSEWHERE_PCT:
        lines.append(
            f"warning: other programs or the kernel used {cpu['other']:g}% of a core during the"
            " window: the roles had less CPU than the machine has, and the rate and lateness"
            " may be understated"
        )
    api = timeline.api
    lines.append(
        f"API reads: {api.get('requests')} requests, statuses {api.get('statuses')},"
        f" p50 {api.get('p50_ms')} ms, p99 {api.get('p99_ms')} ms"
    )
    counts = {name: len(found) for name, found in observed.warnings.items() if found}
    lines.append(
        "log lines at warning or above: "
        + (", ".join(f"{name} {n}" for name, n in counts.items()) if counts else "none")
    )
    return lines


# ---- entry point -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_IDLE:g} s idle and a {QUICK_SECONDS:g} s load window: a smoke test",
    )
    parser.add_argument(
        "--rate", type=float, default=DEFAULT_RATE, help=f"jobs/s (default {DEFAULT_RATE:g})"
    )
    parser.add_argument(
        "--seconds", type=float, help=f"the load window (default {DEFAULT_SECONDS:g})"
    )
    parser.add_argument("--idle", type=float, help=f"the idle phase (default {DEFAULT_IDLE:g})")
    parser.add_argument(
        "--slots", type=int, default=DEFAULT_SLOTS, help=f"per worker (default {DEFAULT_SLOTS})"
    )
    parser.add_argument(
        "--set",
        dest="settings",
        type=setting,
        action="append",
        default=[],
        metavar="JOBLEDGER_NAME=VALUE",
        help="a setting for every role, e.g. JOBLEDGER_AGGREGATE_CACHE_SIZE=0 (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.rate <= 0 or (args.seconds or 1) <= 0 or (args.idle or 1) <= 0 or args.slots < 1:
        parser.error("--rate, --seconds, --idle and --slots must be positive")
    if make_plan(args).jobs < 1:
        parser.error("--rate times --seconds must make at least one job")
    return args


# Set by the script itself, per role or for the run.
OWN_SETTINGS = frozenset(
    f"JOBLEDGER_{name}"
    for name in (
        "DATABASE_URL", "REDIS_URL", "REDIS_PREFIX", "LOG_FORMAT", "WORKER_SLOTS",
        "WORKER_QUEUES", "API_PORT", "METRICS_PORT", "ADMIN_USERNAME", "ADMIN_PASSWORD",
    )
)  # fmt: skip


def setting(text: str) -> tuple[str, str]:
    """``--set JOBLEDGER_NAME=VALUE``, for argparse."""
    name, equals, value = text.partition("=")
    if not equals or not name.startswith("JOBLEDGER_") or not name.isupper():
        raise argparse.ArgumentTypeError(f"{text!r} is not JOBLEDGER_NAME=VALUE")
    if name in OWN_SETTINGS:
        raise argparse.ArgumentTypeError(f"the script sets {name} itself")
    return name, value


def make_plan(args: argparse.Namespace) -> Plan:
    seconds = args.seconds or (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    idle = args.idle or (QUICK_IDLE if args.quick else DEFAULT_IDLE)
    return Plan(args.rate, seconds, idle, args.slots, tuple(args.settings))


def stem(args: argparse.Namespace) -> str:
    suffix = "-quick" if args.quick else ""
    if args.rate != DEFAULT_RATE:
        suffix += f"-rate{args.rate:g}"
    if args.seconds is not None:
        suffix += f"-s{args.seconds:g}"
    if args.idle is not None:
        suffix += f"-idle{args.idle:g}"
    if args.slots != DEFAULT_SLOTS:
        suffix += f"-slots{args.slots}"
    for name, value in args.settings:
        short = name.removeprefix("JOBLEDGER_").lower().replace("_", "-")
        suffix += f"-{short}{''.join(c for c in value if c.isalnum())}"
    return f"footprint{suffix}"


def report(observed: Observed, plan: Plan) -> tuple[list[ProcessRow], list[RoleRow]]:
    processes = [process_row(m, observed) for m in observed.members]
    roles = role_rows(processes, observed.members)
    print(
        f"{plan.jobs:,} one-shot test.echo jobs due at {plan.rate:g}/s over {plan.seconds:g} s,"
        f" after {plan.idle:g} s idle; workers with {plan.slots} slots; "
        + "".join(f"{name}={value}; " for name, value in plan.settings)
        + f"RSS every {SAMPLE_EVERY:g} s; MiB = 2^20 bytes; target: scheduler and worker"
        f" processes under {TARGET_MIB:g} MiB (VmHWM)\n"
    )
    print(support.format_table(roles, ROLE_COLUMNS, show))
    print()
    print(support.format_table(processes, PROCESS_COLUMNS, show))
    print()
    print(support.format_table(observed.audit.rows, LOAD_COLUMNS, show))
    print()
    print("\n".join(summary_lines(observed, plan)))
    return processes, roles


def document(
    observed: Observed,
    plan: Plan,
    tables: tuple[list[ProcessRow], list[RoleRow]],
    context: Mapping[str, object],
) -> dict[str, object]:
    processes, roles = tables
    timeline = observed.timeline
    return {
        "benchmark": "footprint",
        "recorded_at": support.recorded_at(),
        **context,
        **support.machine(),
        "load_average_after": support.load_average(),
        "plan": asdict(plan) | {"jobs": plan.jobs, "sample_every_s": SAMPLE_EVERY},
        "target_mib": TARGET_MIB,
        "roles": [asdict(row) for row in roles],
        "processes": [asdict(row) for row in processes],
        "load": [asdict(row) for row in observed.audit.rows],
        "sustained": observed.audit.sustained,
        "problems": observed.audit.problems,
        "log_notes": observed.audit.notes,
        "topics": observed.audit.topics,
        "cpu_during_load_pct": machine_during_load(observed),
        "timeline": {
            "window_start": timeline.start.isoformat(),
            "startup_s": round(timeline.startup_s, 1),
            "create_s": round(timeline.create_s, 1),
            "drain_s": round(timeline.drain_s, 1),
            "leader": timeline.leader,
        },
        "api_reads": timeline.api,
        "warnings": {name: found[:5] for name, found in observed.warnings.items() if found},
        "rss_series_mib": {
            name: [[at, round(kib / MIB, 1)] for at, kib in trace.series]
            for name, trace in observed.traces.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    begun = time.perf_counter()
    before = support.load_average()
    try:
        with (
            support.throwaway_postgres(args.admin_url) as url,
            support.private_redis() as redis_url,
            tempfile.TemporaryDirectory(prefix="jobledger-bench-footprint-") as folder,
        ):
            store = support.versions(url, redis_url)
            support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {before}")
            observed = measure(plan, url, redis_url, Path(folder))
    except KeyboardInterrupt:
        support.log("interrupted; the roles and redis-server were stopped, the database dropped")
        return 130
    seconds = time.perf_counter() - begun
    tables = report(observed, plan)
    print(f"\nrun time {seconds:.0f} s")
    context = {
        "quick": args.quick,
        "store": store,
        "load_average_before": before,
        "run_seconds": round(seconds, 1),
    }
    path = support.write_json(stem(args), document(observed, plan, tables, context))
    print(f"JSON: {path}")
    return 1 if observed.audit.problems else 0


if __name__ == "__main__":
    sys.exit(main())
