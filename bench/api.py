"""REST API: requests per second and latency of one `jobledger api` process.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); seeds 1,000 cron jobs through the ledger, then starts
``python -m jobledger.cli api --with-projector`` in a session of its own. Stops the API
process and the server and drops the database at the end, also on an error or Ctrl-C.

    python -m bench.api [--quick] [--concurrency N] [--duration S] [--profile]
        [--py-spy PATH] [--admin-url URL]

Each scenario runs N client threads (8 by default), each with its own keep-alive
``httpx.Client`` and a Bearer token, first for a short warm-up, then for the measured
duration; every request is timed on its own (``time.perf_counter``), and any answer
other than 2xx is an error. The CPU time of the API process, this script, PostgreSQL,
the private redis-server and the whole machine is read from ``/proc`` around the
measured part.

With ``--profile``, py-spy samples the API process during each measured part (the
thread holding the GIL) and the functions the samples fall in are printed; the profiler slows the
server, so take the figures from a run without it.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import random
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
from typing import TYPE_CHECKING

import httpx

from bench import _support as support
from jobledger.adapters.store import migrate
from jobledger.bootstrap import bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import Settings, load_settings
from jobledger.services.actors import operator_of_store
from jobledger.services.jobs import Jobs

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from typing import Any

JOBS = 1000
PREFIX = "bench-api"
ADMIN = "admin"
PASSWORD = "Bench-Ledger-7391-x"  # noqa: S105 (a throwaway account on a throwaway database)
QUEUES = ("default", "reports", "emails", "billing")
FILTER_QUEUE = "reports"
CRONS = ("*/5 * * * *", "0 * * * *", "30 2 * * *", "15 */6 * * 1-5", "0 9 * * 1", "* * * * *")
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
PAGE = 50
START_TIMEOUT = 60.0  # seconds for /health to answer
CATCH_UP_TIMEOUT = 120.0  # seconds for the read models to hold what was written
REQUEST_TIMEOUT = 30.0
DEFAULT_CONCURRENCY = 8
PROFILE_RATE = 100  # py-spy samples per second
PROFILE_TOP = 12
# Files of the frames every stack passes through (the entry point, the event loop, the
# thread pools), left out of the inclusive lists.
TRUNK = (
    "<frozen runpy>",
    "jobledger/cli.py",
    "jobledger/api/server.py",
    "uvicorn/server.py",
    "uvicorn/_compat.py",
    "asyncio/runners.py",
    "asyncio/base_events.py",
    "asyncio/events.py",
    "threading.py",
    "concurrent/futures/thread.py",
)
ERROR_TEXT = 300  # characters of an error response kept
PARTS = ("api", "client", "postgres", "redis")  # CPU groups of the run's own processes
OTHER_WARNING = 25.0  # % of a core used by other programs that makes the figures suspect


@dataclass(frozen=True)
class Sizes:
    duration: float  # measured seconds per scenario
    warmup: float


def sizes(*, quick: bool, duration: float | None) -> Sizes:
    base = Sizes(2.0, 0.5) if quick else Sizes(10.0, 2.0)
    return Sizes(duration, base.warmup) if duration is not None else base


# ---- the requests ----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    url: str
    body: dict[str, object] | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    slug: str
    call: Callable[[random.Random], Call]
    writes: bool = False  # each 2xx adds an execution to the read models


def scenarios(job_ids: Sequence[uuid.UUID], run: str) -> list[Scenario]:
    numbers = itertools.count()  # next() on a count is atomic in CPython

    def post_execution(_: random.Random) -> Call:
        n = next(numbers)
        return Call(
            "POST",
            "/api/v1/executions",
            {"handler": "test.echo", "payload": {"n": n}},
            {"Idempotency-Key": f"bench-{run}-{n}"},
        )

    return [
        Scenario(
            f"GET /api/v1/jobs?limit={PAGE}",
            "jobs-list",
            lambda _: Call("GET", f"/api/v1/jobs?limit={PAGE}"),
        ),
        Scenario(
            f"GET /api/v1/jobs?queue={FILTER_QUEUE}&limit={PAGE}",
            "jobs-list-queue",
            lambda _: Call("GET", f"/api/v1/jobs?queue={FILTER_QUEUE}&limit={PAGE}"),
        ),
        Scenario(
            "GET /api/v1/jobs/{id}",
            "job-get",
            lambda chance: Call("GET", f"/api/v1/jobs/{chance.choice(job_ids)}"),
        ),
        Scenario("POST /api/v1/executions", "executions-post", post_execution, writes=True),
        Scenario(
            f"GET /api/v1/executions?limit={PAGE}",
            "executions-list",
            lambda _: Call("GET", f"/api/v1/executions?limit={PAGE}"),
        ),
    ]


@dataclass
class Tally:
    """What the threads of one phase saw."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds, every request
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    samples: dict[int, str] = field(default_factory=dict)  # first text per error status

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300)

    @property
    def accepted(self) -> int:
        return self.statuses.total() - self.errors


@dataclass
class Phase:
    """What the client threads of one phase share."""

    scenario: Scenario
    start: threading.Barrier
    stop: threading.Event = field(default_factory=threading.Event)
    deadline: float = 0.0  # perf_counter time; set before the barrier opens


def client_thread(phase: Phase, client: httpx.Client, chance: random.Random, tally: Tally) -> None:
    """Requests one after another until the deadline; status 0 is a transport error."""
    try:
        phase.start.wait()
    except threading.BrokenBarrierError:
        return
    while not phase.stop.is_set() and time.perf_counter() < phase.deadline:
        call = phase.scenario.call(chance)
        begun = time.perf_counter()
        try:
            response = client.request(call.method, call.url, json=call.body, headers=call.headers)
            status, text = response.status_code, response.text
        except httpx.HTTPError as error:
            status, text = 0, f"{type(error).__name__}: {error}"
        tally.latencies.append(time.perf_counter() - begun)
        tally.statuses[status] += 1
        if not 200 <= status < 300 and status not in tally.samples:
            tally.samples[status] = text[:ERROR_TEXT]


def drive(clients: Sequence[httpx.Client], scenario: Scenario, seconds: float, seed: int) -> Tally:
    """All clients at once for ``seconds``; the wall time runs until the last answer."""
    tallies = [Tally() for _ in clients]
    phase = Phase(scenario, threading.Barrier(len(clients) + 1))
    threads = [
        threading.Thread(
            target=client_thread,
            args=(phase, client, random.Random(seed + i), tally),
            name=f"client-{i}",
            daemon=True,
        )
        for i, (client, tally) in enumerate(zip(clients, tallies, strict=True))
    ]
    for thread in threads:
        thread.start()
    try:
        begun = time.perf_counter()
        phase.deadline = begun + seconds
        phase.start.wait()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - begun
    finally:
        phase.stop.set()
        phase.start.abort()
    total = Tally(seconds=elapsed)
    for tally in tallies:
        total.latencies += tally.latencies
        total.statuses += tally.statuses
        for status, text in tally.samples.items():
            total.samples.setdefault(status, text)
    return total


# ---- CPU use ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuSample:
    at: float
    seconds: dict[str, float]


def cpu_groups(api_pid: int, database: str, redis_port: int) -> dict[str, Callable[[], list[int]]]:
    """The API process (and anything it forked), this script, PostgreSQL's own processes
    and the sessions of the benchmark's database, the private redis-server."""

    def ours(title: str) -> bool:
        return f" {database} " in title or "(" not in title  # a session shows its client

    def private(title: str) -> bool:
        return f":{redis_port}" in title

    return {
        "api": lambda: support.process_tree(api_pid),
        "client": lambda: [os.getpid()],
        "postgres": lambda: support.pids_named("postgres", title=ours),
        "redis": lambda: support.pids_named("redis-server", title=private),
    }


def cpu_sample(groups: Mapping[str, Callable[[], list[int]]]) -> CpuSample:
    seconds = {name: support.cpu_seconds(pids()) for name, pids in groups.items()}
    seconds["machine"] = support.machine_cpu_seconds()
    return CpuSample(time.perf_counter(), seconds)


def cpu_pct(first: CpuSample, last: CpuSample) -> dict[str, float]:
    """% of one core per group between two samples (the machine: all cores added)."""
    wall = last.at - first.at
    if wall <= 0:
        return dict.fromkeys(first.seconds, 0.0)
    return {
        name: round(100 * (last.seconds[name] - first.seconds[name]) / wall, 1)
        for name in first.seconds
    }


# ---- py-spy ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampled:
    """Where one scenario's samples fell, in % of them."""

    scenario: str
    seconds: float
    samples: int
    gil_pct: float  # of the time, a thread of the API held the GIL
    threads: list[tuple[str, float]]
    packages: list[tuple[str, float]]  # of the sampled function's file
    own: list[tuple[str, float]]  # the sampled function
    inclusive: list[tuple[str, float]]  # on the stack, all functions
    jobledger: list[tuple[str, float]]  # on the stack, jobledger's functions


class Spy:
    """py-spy on the API process while a scenario is measured: 100 times a second, the
    thread that holds the GIL (where its Python code spends CPU; waits do not show)."""

    def __init__(self, binary: str, pid: int, folder: Path) -> None:
        self._binary = binary
        self._pid = pid
        self._folder = folder
        self._process: subprocess.Popen[bytes] | None = None
        self._path = folder / "none.txt"
        self._begun = 0.0
        self.outputs: list[Path] = []

    def start(self, slug: str) -> None:
        self._path = self._folder / f"py-spy-{slug}.txt"
        args = [self._binary, "record", "--pid", str(self._pid), "--rate", str(PROFILE_RATE)]
        args += ["--gil", "--threads", "--format", "raw", "--output", str(self._path)]
        self._process = subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._begun = time.perf_counter()

    def finish(self, scenario: str) -> Sampled | None:
        process, self._process = self._process, None
        if process is None:
            return None
        seconds = time.perf_counter() - self._begun
        process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if not self._path.exists():
            support.log(f"  py-spy wrote no profile (exit status {process.returncode})")
            return None
        self.outputs.append(self._path)
        return summarize(scenario, self._path, seconds)

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


def stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """(frames, samples) per line of py-spy's raw output; the thread is the first frame."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, number = line.rpartition(" ")
        if stack and number.isdigit():
            yield stack.split(";"), int(number)


def short_frame(frame: str) -> str:
    """``function (path/file.py:line)`` as ``path/file.py:function``."""
    name, _, where = frame.partition(" (")
    return f"{where.rstrip(')').rpartition(':')[0]}:{name}"


def thread_group(frame: str) -> str:
    """``thread (123): AnyIO worker thread`` as its name; numbered names as ``name*``."""
    name = frame.partition(": ")[2] or frame
    return name.rstrip("0123456789-_") + "*" if name[-1:].isdigit() else name


def package_of(frame: str) -> str:
    """The first part of a sampled function's file: ``litestar``, ``psycopg``, ``asyncio``."""
    where = frame.partition(" (")[2].rstrip(")").rpartition(":")[0]
    return where.split("/", 1)[0]


def summarize(scenario: str, path: Path, seconds: float) -> Sampled:
    threads: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, weight in stacks(path):
        total += weight
        thread, *calls = frames
        threads[thread_group(thread)] += weight
        if calls:
            own[short_frame(calls[-1])] += weight
            packages[package_of(calls[-1])] += weight
        for name in {short_frame(call) for call in calls}:
            if not name.startswith(TRUNK):
                inclusive[name] += weight

    def shares(counter: collections.Counter[str], *, only: str = "") -> list[tuple[str, float]]:
        picked = [(k, n) for k, n in counter.most_common() if k.startswith(only)][:PROFILE_TOP]
        return [(name, round(100 * n / total, 1)) for name, n in picked] if total else []

    possible = PROFILE_RATE * seconds
    return Sampled(
        scenario=scenario,
        seconds=round(seconds, 2),
        samples=total,
        gil_pct=round(100 * total / possible, 1) if possible else 0.0,
        threads=shares(threads),
        packages=shares(packages),
        own=shares(own),
        inclusive=shares(inclusive),
        jobledger=shares(inclusive, only="jobledger/"),
    )


def format_profile(sampled: Sampled) -> str:
    head = (
        f"{sampled.scenario}: {sampled.samples} samples over {sampled.seconds:g} s, "
        f"a thread held the GIL {sampled.gil_pct:g} % of the time"
    )
    lines = [head]
    parts = (
        ("threads", sampled.threads),
        ("sampled function's package", sampled.packages),
        ("sampled function (own)", sampled.own),
        ("on the stack (inclusive)", sampled.inclusive),
        ("jobledger on the stack", sampled.jobledger),
    )
    for title, entries in parts:
        lines.append(f"  {title}:")
        lines += [f"    {pct:5.1f} %  {name}" for name, pct in entries]
    return "\n".join(lines)


# ---- the API process -------------------------------------------------------------------


class Api:
    """``jobledger api --with-projector`` (or without the projector) in a session of its
    own, output in a file."""

    def __init__(
        self, folder: Path, env: Mapping[str, str], *, with_projector: bool = True
    ) -> None:
        self.log_path = folder / "api.log"
        self.port = int(env["JOBLEDGER_API_PORT"])
        self.base_url = f"http://127.0.0.1:{self.port}"
        with self.log_path.open("ab") as output:
            self.process = subprocess.Popen(  # noqa: S603 (our own entry point, fixed arguments)
                [
                    sys.executable,
                    "-m",
                    "jobledger.cli",
                    "api",
                    *(["--with-projector"] if with_projector else []),
                ],
                stdout=output,
                stderr=output,
                env=dict(env),
                cwd=folder,  # not bench/: its queue.py would shadow the stdlib's
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"the API process exited with {self.process.returncode}; the end of its log:\n"
                + support.tail(self.log_path)
            )

    def wait_healthy(self) -> float:
        begun = time.perf_counter()
        deadline = begun + START_TIMEOUT
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while True:
                self.check()
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/health").status_code == 200:
                        return time.perf_counter() - begun
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"/health did not answer 200 within {START_TIMEOUT:g}s")
                time.sleep(0.1)

    def stop(self) -> None:
        support.stop_group(self.process)

    def problems(self) -> list[str]:
        """Log lines at warning level or above (JSON lines; other lines as they are)."""
        found = []
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
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


def api_env(url: str, redis_url: str, port: int) -> dict[str, str]:
    """This environment without jobledger's variables, plus the API's settings."""
    dropped = {"ADMIN_USERNAME", "ADMIN_PASSWORD"}
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_") and k not in dropped
    }
    env.update(
        JOBLEDGER_DATABASE_URL=url,
        JOBLEDGER_REDIS_URL=redis_url,
        JOBLEDGER_REDIS_PREFIX=PREFIX,
        JOBLEDGER_API_PORT=str(port),
        JOBLEDGER_TEST_HANDLERS="true",
        JOBLEDGER_ADMIN_USERNAME=ADMIN,
        JOBLEDGER_ADMIN_PASSWORD=PASSWORD,
        JOBLEDGER_LOG_LEVEL="warning",
        JOBLEDGER_LOG_FORMAT="json",
        # The benchmarks measure the API, not its budgets: one client token at full
        # speed is never refused (ADR 77).
        JOBLEDGER_API_REQUESTS_PER_CREDENTIAL="1000000",
        JOBLEDGER_API_REQUESTS_PER_ADDRESS="1000000",
        JOBLEDGER_API_RUNS_PER_MINUTE="1000000",
        JOBLEDGER_API_LONG_POLLS="100000",
    )
    return env


def sign_in(base_url: str) -> str:
    """Log in as the admin (cookie and CSRF token), create an admin API token; its secret."""
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT) as client:
        login = client.post("/api/v1/auth/login", json={"username": ADMIN, "password": PASSWORD})
        expect(login, "login")
        csrf = str(login.json()["csrf_token"])
        created = client.post(
            "/api/v1/tokens",
            json={"name": "bench", "role": "admin"},
            headers={"X-CSRF-Token": csrf},
        )
        expect(created, "creating a token")
        return str(created.json()["secret"])


def expect(response: httpx.Response, what: str) -> None:
    if not response.is_success:
        raise RuntimeError(f"{what}: HTTP {response.status_code}: {response.text[:ERROR_TEXT]}")


def wait_for_total(client: httpx.Client, path: str, total: int, api: Api) -> float:
    """Poll ``path`` until its page reports at least ``total`` rows; the seconds it took."""
    begun = time.perf_counter()
    deadline = begun + CATCH_UP_TIMEOUT
    seen = -1
    while True:
        api.check()
        response = client.get(path)
        expect(response, f"GET {path}")
        seen = int(response.json()["total"])
        if seen >= total:
            return time.perf_counter() - begun
        if time.perf_counter() > deadline:
            raise RuntimeError(
                f"GET {path} reports {seen} rows, not {total}, after {CATCH_UP_TIMEOUT:g}s"
            )
        time.sleep(0.05)


# ---- seeding ---------------------------------------------------------------------------


def definition(i: int) -> JobDefinition:
    """Job ``i`` of the seed: a cron job, with its handler, queue and zone varying."""
    handlers: list[tuple[str, dict[str, Any]]] = [
        ("test.echo", {"n": i}),
        ("test.log", {"message": f"report {i} is ready"}),
        ("http.webhook", {"url": f"https://example.com/hooks/{i}", "body": {"job": i}}),
        ("test.delay", {"seconds": 0.5}),
    ]
    handler, payload = handlers[i % len(handlers)]
    return JobDefinition(
        name=f"bench job {i:04d}",
        spec=ExecutionSpec(
            handler=handler,
            payload=payload,
            queue=QUEUES[(i // len(handlers)) % len(QUEUES)],
            priority=i % 10,
        ),
        schedule=CronSchedule(CRONS[i % len(CRONS)], ZONES[i % len(ZONES)]),
        description=f"seeded by bench/api.py ({handler})",
    )


def seed_jobs(settings: Settings, count: int) -> list[uuid.UUID]:
    migrate(settings, progress=support.log)
    configure_logging(settings)
    with bootstrap(settings) as container:
        now = datetime.now(UTC)
        return [
            Jobs(container.ledger).schedule(definition(i), at=now, by=operator_of_store("bench")).id
            for i in range(count)
        ]


# ---- one scenario ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    scenario: str
    requests: int
    req_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    api_cpu: float  # % of one core
    api_cpu_ms: float  # CPU time of the API process per request
    client_cpu: float
    pg_cpu: float
    redis_cpu: float
    machine_cpu: float  # all cores added
    other_cpu: float  # the machine less the parts above: other programs, the kernel


@dataclass
class Measured:
    row: Row
    statuses: dict[str, int]
    error_samples: dict[str, str]
    catch_up_s: float | None = None
    profile: Sampled | None = None


def figures(scenario: Scenario, tally: Tally, cpu: Mapping[str, float]) -> Row:
    ordered = sorted(value * 1000 for value in tally.latencies)

    def ms(fraction: float) -> float:
        return round(support.percentile(ordered, fraction), 2)

    return Row(
        scenario=scenario.name,
        requests=len(ordered),
        req_s=round(len(ordered) / tally.seconds, 1) if tally.seconds > 0 else 0.0,
        p50_ms=ms(0.50),
        p95_ms=ms(0.95),
        p99_ms=ms(0.99),
        max_ms=round(ordered[-1], 2) if ordered else 0.0,
        errors=tally.errors,
        api_cpu=cpu["api"],
        api_cpu_ms=round(10 * cpu["api"] * tally.seconds / len(ordered), 2) if ordered else 0.0,
        client_cpu=cpu["client"],
        pg_cpu=cpu["postgres"],
        redis_cpu=cpu["redis"],
        machine_cpu=cpu["machine"],
        other_cpu=round(max(0.0, cpu["machine"] - sum(cpu[part] for part in PARTS)), 1),
    )


@dataclass(frozen=True)
class Load:
    base_url: str
    token: str
    concurrency: int
    size: Sizes


def measure(
    scenario: Scenario,
    load: Load,
    groups: Mapping[str, Callable[[], list[int]]],
    spy: Spy | None,
    seed: int,
) -> tuple[Measured, int]:
    """Warm up, then measure; returns the figures and the 2xx answers of both phases."""
    headers = {"Authorization": f"Bearer {load.token}"}
    clients = [
        httpx.Client(base_url=load.base_url, headers=headers, timeout=REQUEST_TIMEOUT)
        for _ in range(load.concurrency)
    ]
    try:
        warm = drive(clients, scenario, load.size.warmup, seed)
        if spy is not None:
            spy.start(scenario.slug)
        first = cpu_sample(groups)
        tally = drive(clients, scenario, load.size.duration, seed + load.concurrency)
        last = cpu_sample(groups)
        sampled = spy.finish(scenario.name) if spy is not None else None
    finally:
        for client in clients:
            client.close()
    measured = Measured(
        row=figures(scenario, tally, cpu_pct(first, last)),
        statuses={str(status): n for status, n in sorted(tally.statuses.items())},
        error_samples={str(status): text for status, text in sorted(tally.samples.items())},
        profile=sampled,
    )
    if warm.errors:
        support.log(f"  warm-up: {warm.errors} errors of {warm.statuses.total()} requests")
        for status, text in sorted(warm.samples.items()):
            support.log(f"    {status}: {text}")
    return measured, warm.accepted + tally.accepted


def run_scenarios(
    api: Api,
    load: Load,
    job_ids: Sequence[uuid.UUID],
    groups: Mapping[str, Callable[[], list[int]]],
    spy: Spy | None,
) -> list[Measured]:
    results = []
    written = 0
    run = uuid.uuid4().hex[:8]
    headers = {"Authorization": f"Bearer {load.token}"}
    with httpx.Client(base_url=load.base_url, headers=headers, timeout=REQUEST_TIMEOUT) as probe:
        for number, scenario in enumerate(scenarios(job_ids, run)):
            support.log(
                f"{scenario.name}: {load.concurrency} clients, warm-up {load.size.warmup:g} s, "
                f"then {load.size.duration:g} s"
            )
            measured, accepted = measure(scenario, load, groups, spy, seed=1000 * number)
            api.check()
            row = measured.row
            support.log(
                f"  {row.requests} requests, {row.req_s:g}/s, p50 {row.p50_ms:g} ms, "
                f"p99 {row.p99_ms:g} ms, {row.errors} errors; API {row.api_cpu:g} % of a core"
            )
            if scenario.writes:
                written += accepted
                path = "/api/v1/executions?limit=1"
                measured.catch_up_s = round(wait_for_total(probe, path, written, api), 2)
                support.log(
                    f"  the read models hold all {written} executions "
                    f"{measured.catch_up_s:.2f} s after the last request"
                )
            results.append(measured)
    return results


# ---- output ----------------------------------------------------------------------------

COLUMNS = (
    ("scenario", "{:<38}"),
    ("requests", "{:>8}"),
    ("req_s", "{:>8}"),
    ("p50_ms", "{:>7}"),
    ("p95_ms", "{:>7}"),
    ("p99_ms", "{:>7}"),
    ("max_ms", "{:>7}"),
    ("errors", "{:>6}"),
    ("api_cpu", "{:>7}"),
    ("api_cpu_ms", "{:>10}"),
    ("client_cpu", "{:>10}"),
    ("pg_cpu", "{:>6}"),
    ("redis_cpu", "{:>9}"),
    ("machine_cpu", "{:>11}"),
    ("other_cpu", "{:>9}"),
)


def describe(load: Load, jobs: int) -> str:
    cpus = os.cpu_count() or 1
    return (
        f"one `jobledger api --with-projector` process, {jobs} cron jobs; "
        f"{load.concurrency} client threads (keep-alive httpx, Bearer token), "
        f"warm-up {load.size.warmup:g} s, measured {load.size.duration:g} s per scenario.\n"
        f"CPU columns: % of one core over the measured part (machine: all {cpus} cores "
        f"added, up to {cpus * 100} %; other: the machine less the parts before it); "
        "api_cpu_ms: CPU time of the API process per request.\n"
    )


def report_errors(results: Sequence[Measured]) -> str:
    lines = []
    for measured in results:
        for status, text in measured.error_samples.items():
            count = measured.statuses[status]
            lines.append(f"{measured.row.scenario}: {count} x HTTP {status}: {text}")
    return "\n".join(lines)


def write_results(
    results: Sequence[Measured],
    args: argparse.Namespace,
    load: Load,
    extra: Mapping[str, object],
) -> Path:
    suffix = "-quick" if args.quick else ""
    suffix += f"-c{load.concurrency}" if load.concurrency != DEFAULT_CONCURRENCY else ""
    suffix += f"-d{args.duration:g}" if args.duration is not None else ""
    suffix += "-profile" if args.profile else ""
    document = {
        "benchmark": "api",
        "recorded_at": support.recorded_at(),
        "quick": args.quick,
        "profiled": args.profile,
        **support.machine(),
        **extra,
        "api_command": "python -m jobledger.cli api --with-projector",
        "api_settings": {
            "JOBLEDGER_REDIS_PREFIX": PREFIX,
            "JOBLEDGER_LOG_LEVEL": "warning",
            "JOBLEDGER_LOG_FORMAT": "json",
        },
        "jobs": JOBS,
        "concurrency": load.concurrency,
        "warmup_s": load.size.warmup,
        "duration_s": load.size.duration,
        "rows": [asdict(m.row) for m in results],
        "statuses": {m.row.scenario: m.statuses for m in results},
        "errors": {m.row.scenario: m.error_samples for m in results if m.error_samples},
        "read_model_catch_up_s": {
            m.row.scenario: m.catch_up_s for m in results if m.catch_up_s is not None
        },
        "profile": [asdict(m.profile) for m in results if m.profile is not None],
    }
    return support.write_json(f"api{suffix}", document)


# ---- entry point -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="2 s per scenario (0.5 s warm-up), a smoke test"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"client threads, each with its own connection (default {DEFAULT_CONCURRENCY})",
    )
    parser.add_argument(
        "--duration", type=float, help="measured seconds per scenario (default 10; 2 with --quick)"
    )
    parser.add_argument("--profile", action="store_true", help="sample the API process with py-spy")
    parser.add_argument(
        "--py-spy", dest="py_spy", help="the py-spy binary (default: py-spy on PATH)"
    )
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return args


def spy_binary(args: argparse.Namespace) -> str | None:
    if not args.profile:
        return None
    binary = args.py_spy or shutil.which("py-spy")
    if binary is None:
        raise SystemExit("--profile needs py-spy (on PATH, or --py-spy PATH)")
    return str(binary)


@dataclass
class Outcome:
    results: list[Measured]
    load: Load
    store: str
    load_before: list[float]
    load_after: list[float]
    problems: list[str]  # API log lines at warning level or above


def run(args: argparse.Namespace, size: Sizes, folder: Path) -> Outcome:
    with (
        support.throwaway_postgres(args.admin_url) as url,
        support.private_redis() as redis_url,
    ):
        settings = load_settings(
            {},
            test_handlers="true",
            database_url=url,
            redis_url=redis_url,
            redis_prefix=PREFIX,
            log_level="warning",
        )
        store = support.versions(url, redis_url)
        before = support.load_average()
        support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {before}")
        begun = time.perf_counter()
        job_ids = seed_jobs(settings, JOBS)
        support.log(f"seeded {len(job_ids)} cron jobs in {time.perf_counter() - begun:.1f} s")
        api = Api(folder, api_env(url, redis_url, support.free_port()))
        spy = None
        try:
            started = api.wait_healthy()
            support.log(f"API up on port {api.port} (pid {api.pid}) after {started:.1f} s")
            load = Load(api.base_url, sign_in(api.base_url), args.concurrency, size)
            headers = {"Authorization": f"Bearer {load.token}"}
            with httpx.Client(base_url=api.base_url, headers=headers) as probe:
                caught = wait_for_total(probe, "/api/v1/jobs?limit=1", JOBS, api)
            support.log(f"the read models hold all {JOBS} jobs ({caught:.1f} s after sign-in)")
            binary = spy_binary(args)
            spy = Spy(binary, api.pid, folder) if binary is not None else None
            redis_port = int(redis_url.rpartition(":")[2].partition("/")[0])
            groups = cpu_groups(api.pid, url.rpartition("/")[2], redis_port)
            results = run_scenarios(api, load, job_ids, groups, spy)
            if spy is not None:
                kept = keep_profiles(spy.outputs)
                support.log(f"py-spy stacks: {', '.join(str(p) for p in kept)}")
        finally:
            if spy is not None:
                spy.close()
            api.stop()
            support.log("stopped the API process")
        return Outcome(results, load, store, before, support.load_average(), api.problems())


def keep_profiles(paths: Sequence[Path]) -> list[Path]:
    """Copy the raw stacks (collapsed format, for a flame graph) to the results."""
    support.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    kept = []
    for path in paths:
        target = support.RESULTS_DIR / f"api-profile-{path.name}"
        shutil.copyfile(path, target)
        kept.append(target)
    return kept


def print_outcome(outcome: Outcome) -> None:
    print(describe(outcome.load, JOBS))
    print(support.format_table([m.row for m in outcome.results], COLUMNS))
    for measured in outcome.results:
        row = measured.row
        if row.other_cpu >= OTHER_WARNING:
            print(
                f"warning: other programs used {row.other_cpu:g} % of a core during "
                f"{row.scenario}; its figures are understated"
            )
    errors = report_errors(outcome.results)
    print("\nerrors:\n" + errors if errors else "\nno errors")
    for measured in outcome.results:
        if measured.catch_up_s is not None:
            print(
                f"{measured.row.scenario}: the read models held every new execution "
                f"{measured.catch_up_s:.2f} s after the last request"
            )
    print(f"API log: {len(outcome.problems)} lines at warning level or above")
    for line in outcome.problems[:5]:
        print(f"  {line[:ERROR_TEXT]}")
    for measured in outcome.results:
        if measured.profile is not None:
            print("\n" + format_profile(measured.profile))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = sizes(quick=args.quick, duration=args.duration)
    spy_binary(args)  # refuse early when py-spy is missing
    begun = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="jobledger-bench-api-") as name:
            outcome = run(args, size, Path(name))
    except KeyboardInterrupt:
        support.log(
            "interrupted; the API process and redis-server were stopped, the database dropped"
        )
        return 130
    elapsed = time.perf_counter() - begun
    print_outcome(outcome)
    extra = {
        "store": outcome.store,
        "load_average_before": outcome.load_before,
        "load_average_after": outcome.load_after,
        "run_time_s": round(elapsed, 1),
        "api_log_problem_count": len(outcome.problems),
        "api_log_problems": outcome.problems[:20],
    }
    path = write_results(outcome.results, args, outcome.load, extra)
    print(f"\nrun time {elapsed:.0f} s; JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
