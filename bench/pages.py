"""Dashboard pages: server time per page with 1,000 jobs and 100,000 executions.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops both at the end, also on an error or Ctrl-C.

    python -m bench.pages [--quick] [--requests N] [--admin-url URL]

Seeding goes through the ledger in big transactions (``ledger.save_all``): 1,000 cron
jobs (every tenth runs ``test.fail`` with no retries), each triggered 100 times, so
100,000 executions: a tenth dead-lettered, one in thirty of the rest still pending,
the others leased and completed. Then the read models and the queue are rebuilt from
the log (``bench.scale`` times the pages at a million runs). ``jobledger api`` runs
as a subprocess (its own interpreter, so the client does not share its GIL); one
client signed in with a session cookie requests each page a few times to warm up, then
``--requests`` times (default 20) in a row. The time is the round trip over loopback:
the server's work plus a few hundred microseconds.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from bench import _support as support
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition, Limits
from jobledger.domain.job import Job
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import Settings, load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Sequence

    from jobledger.domain.execution import Execution

FAILING_EVERY = 10  # every tenth job runs test.fail with no retries: its runs dead-letter
PENDING_EVERY = 30  # one run in thirty of the other jobs waits in the queue
SAVE_JOBS = 10  # jobs, with all their executions, per transaction
WARMUP = 3
TARGET_MS = 300.0
START_TIMEOUT = 30.0
ADMIN = "bench"
PASSWORD = "bench pages correct horse"  # noqa: S105 (a throwaway account of a throwaway database)
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
CRONS = ("*/5 * * * *", "0 * * * *", "30 2 * * *", "15 9 * * 1-5", "0 0 1 * *")

COLUMNS: support.Columns = (
    ("page", "{:<22}"),
    ("requests", "{:>8}"),
    ("p50_ms", "{:>8}"),
    ("p95_ms", "{:>8}"),
    ("max_ms", "{:>8}"),
    ("kb", "{:>7}"),
    ("met", "{:>4}"),
    ("path", "{}"),
)


@dataclass(frozen=True)
class Sizes:
    jobs: int
    runs_per_job: int
    requests: int


def sizes(*, quick: bool, requests: int | None) -> Sizes:
    if quick:
        return Sizes(100, 20, requests or 5)
    return Sizes(1000, 100, requests or 20)


@dataclass(frozen=True)
class Seeded:
    job_id: uuid.UUID  # a job with all its runs completed or pending
    execution_id: uuid.UUID  # one of its completed runs
    executions: int
    events: int
    seconds: float


@dataclass(frozen=True)
class Row:
    page: str
    path: str
    requests: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    kb: float
    met: bool


# ---- seeding -----------------------------------------------------------------------------


def definition(index: int) -> JobDefinition:
    failing = index % FAILING_EVERY == 0
    spec = ExecutionSpec(
        handler="test.fail" if failing else "test.echo",
        payload={"error": "upstream said 503"} if failing else {"report": f"r{index}"},
        queue=("default", "reports")[index % 2],
        retry=RetryPolicy(max_retries=0 if failing else 3),
    )
    schedule = CronSchedule(CRONS[index % len(CRONS)], ZONES[index % len(ZONES)])
    return JobDefinition(name=f"report {index:04d}", spec=spec, schedule=schedule)


def run_to_end(execution: Execution, index: int, now: datetime, rng: random.Random) -> None:
    """Lease the run and report an outcome, or leave it pending."""
    if execution.spec.handler == "test.echo" and index % PENDING_EVERY == 0:
        return
    lease = uuid.uuid4()
    deadline = now + timedelta(minutes=5)
    execution.lease(worker_id=f"bench-{index % 4}", lease_id=lease, lease_expires_at=deadline)
    if execution.spec.handler == "test.fail":
        execution.fail(lease_id=lease, error="HandlerError: upstream said 503", at=now)
        return
    duration = timedelta(milliseconds=rng.uniform(2, 800))
    execution.complete(lease_id=lease, duration=duration, result={"rows": rng.randint(1, 10**6)})


def job_with_runs(
    limits: Limits, index: int, runs: int, rng: random.Random
) -> list[Job | Execution]:
    now = datetime.now(tz=UTC)
    job = Job.schedule(definition(index), at=now, by=ADMIN, limits=limits)
    aggregates: list[Job | Execution] = [job]
    for run in range(runs):
        execution = job.trigger(trigger_key=f"bench-{index}-{run}", at=now, by=ADMIN)
        run_to_end(execution, run, now, rng)
        aggregates.append(execution)
    return aggregates


def seed(container: Container, size: Sizes) -> Seeded:
    rng = random.Random(1)
    started = time.perf_counter()
    ledger = container.ledger
    first_batch: list[Job | Execution] = []
    for first in range(0, size.jobs, SAVE_JOBS):
        batch: list[Job | Execution] = []
        for index in range(first, min(first + SAVE_JOBS, size.jobs)):
            batch += job_with_runs(ledger.limits, index, size.runs_per_job, rng)
        ledger.save_all(*batch)
        first_batch = first_batch or batch
        if first % max(size.jobs // 10, SAVE_JOBS) == 0:
            support.log(f"  saved {first + SAVE_JOBS} jobs")
    # Job 1 runs test.echo (job 0 fails); its run 0 is pending, run 1 completed.
    job, execution = first_batch[size.runs_per_job + 1], first_batch[size.runs_per_job + 3]
    return Seeded(
        job_id=job.id,
        execution_id=execution.id,
        executions=size.jobs * size.runs_per_job,
        events=container.head(),
        seconds=round(time.perf_counter() - started, 1),
    )


def build_projections(container: Container) -> None:
    started = time.perf_counter()
    applied = container.read_models().rebuild()
    support.log(f"read models: {applied} events in {time.perf_counter() - started:.1f} s")
    report = container.projector().queue.rebuild(full=True)
    support.log(f"queue: {report.items} open executions from the {report.source}")


# ---- the server and the pages -----------------------------------------------------------


@contextlib.contextmanager
def api_process(settings: Settings, folder: str) -> Iterator[str]:
    """``jobledger api`` on a free port, in its own session; yields its URL."""
    port = support.free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    environ |= {
        "JOBLEDGER_DATABASE_URL": settings.database_url,
        "JOBLEDGER_REDIS_URL": settings.redis_url,
        "JOBLEDGER_REDIS_PREFIX": settings.redis_prefix,
        "JOBLEDGER_MODE": "dev",
        "JOBLEDGER_ADMIN_USERNAME": ADMIN,
        "JOBLEDGER_ADMIN_PASSWORD": PASSWORD,
        "JOBLEDGER_API_PORT": str(port),
        "JOBLEDGER_LOG_LEVEL": "warning",
    }
    log = Path(folder) / "api.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", "api"],
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        support.wait_for(lambda: _answers(url, process, log), START_TIMEOUT, "the API start")
        yield url
    finally:
        support.stop_group(process)


def _answers(url: str, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"jobledger api exited with {process.returncode}:\n{support.tail(log)}")
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def sign_in(url: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30, headers={"Accept": "text/html"})
    response = client.post("/api/v1/auth/login", json={"username": ADMIN, "password": PASSWORD})
    response.raise_for_status()
    return client


def pages(seeded: Seeded) -> list[tuple[str, str]]:
    since = (datetime.now(tz=UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    job, execution = seeded.job_id, seeded.execution_id
    return [
        ("overview", "/ui"),
        ("jobs", "/ui/jobs"),
        ("jobs, search", "/ui/jobs?search=7"),
        ("jobs, page 10", "/ui/jobs?page=10"),
        ("new job form", "/ui/jobs/new"),
        ("job detail", f"/ui/jobs/{job}"),
        ("edit job form", f"/ui/jobs/{job}/edit"),
        ("executions", "/ui/executions"),
        ("executions, by job", f"/ui/executions?job_id={job}"),
        ("executions, by status", "/ui/executions?status=pending"),
        ("executions, filtered", f"/ui/executions?handler=test.echo&queue=reports&since={since}"),
        ("execution detail", f"/ui/executions/{execution}"),
        ("workers", "/ui/workers"),
        ("dead letters", "/ui/dlq"),
        ("dead letters, error", "/ui/dlq?error_contains=503&handler=test.fail"),
        ("executions, search", f"/ui/executions?search={str(execution)[:8]}"),
        ("dead letters, search", "/ui/dlq?search=503"),
        ("workflows", "/ui/workflows"),
        ("queue and system", "/ui/system"),
        ("audit", "/ui/audit"),
    ]


def measure(client: httpx.Client, page: str, path: str, requests: int) -> Row:
    for _ in range(WARMUP):
        client.get(path).raise_for_status()
    times: list[float] = []
    size = 0
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        size = len(response.content)
    ordered = sorted(times)
    p95 = support.percentile(ordered, 0.95)
    return Row(
        page=page,
        path=path,
        requests=requests,
        p50_ms=round(support.percentile(ordered, 0.50), 1),
        p95_ms=round(p95, 1),
        max_ms=round(ordered[-1], 1),
        kb=round(size / 1024, 1),
        met=p95 < TARGET_MS,
    )


# ---- entry point -------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="100 jobs x 20 runs, 5 requests: a smoke test"
    )
    parser.add_argument("--requests", type=int, help="timed requests per page (default 20)")
    return parser.parse_args(argv)


def run(url: str, redis_url: str, size: Sizes) -> tuple[Seeded, list[Row]]:
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=url,
        redis_url=redis_url,
        redis_prefix="bench-pages",
        log_level="warning",
    )
    migrate(settings, progress=support.log)
    configure_logging(settings)
    with bootstrap(settings) as container:
        support.log(f"seeding {size.jobs} jobs x {size.runs_per_job} runs")
        seeded = seed(container, size)
        support.log(f"seeded {seeded.events} events in {seeded.seconds} s")
        build_projections(container)
    with (
        tempfile.TemporaryDirectory(prefix="jobledger-bench-pages-") as folder,
        api_process(settings, folder) as api_url,
        contextlib.closing(sign_in(api_url)) as client,
    ):
        rows = [measure(client, page, path, size.requests) for page, path in pages(seeded)]
    return seeded, rows


def write_json(
    rows: Sequence[Row], seeded: Seeded, size: Sizes, *, quick: bool, store: str
) -> Path:
    document = {
        "benchmark": "pages",
        "recorded_at": support.recorded_at(),
        "quick": quick,
        "store": store,
        **support.machine(),
        "load_average_after": support.load_average(),
        "sizes": asdict(size),
        "seeded": {
            **asdict(seeded),
            "job_id": str(seeded.job_id),
            "execution_id": str(seeded.execution_id),
        },
        "target_p95_ms": TARGET_MS,
        "rows": [asdict(row) for row in rows],
    }
    return support.write_json("pages-quick" if quick else "pages", document)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = sizes(quick=args.quick, requests=args.requests)
    try:
        with (
            support.throwaway_postgres(args.admin_url) as url,
            support.private_redis() as redis_url,
        ):
            store = support.versions(url, redis_url)
            support.log(f"store: {store}; {os.cpu_count()} CPUs")
            seeded, rows = run(url, redis_url, size)
    except KeyboardInterrupt:
        support.log("interrupted; redis-server was stopped and the database dropped")
        return 130
    print(
        f"{seeded.executions} executions of {size.jobs} jobs ({seeded.events} events); "
        f"round trips of {size.requests} requests per page after {WARMUP} to warm up; "
        f"target p95 < {TARGET_MS:g} ms\n"
    )
    print(support.format_table(rows, COLUMNS))
    path = write_json(rows, seeded, size, quick=args.quick, store=store)
    print(f"\nJSON: {path}")
    return 0 if all(row.met for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
