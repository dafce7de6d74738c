"""Scale: a log of 10 million events, and what rebuilds, reads and ticks cost on it.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops both and drops the database at the end, also on
an error or Ctrl-C.

    python -m bench.scale [--events N] [--quick] [--only ticks|api] [--admin-url URL]

Building (not timed as a result, but shown with progress): 10,000 cron jobs through
the ledger, then executions of those jobs by ``COPY`` of stored events until the log
holds N events (10,000,000; 200,000 with ``--quick``). Each execution is one of four
real histories recorded by the domain once and reused under new ids, jobs and times
(spread over the last 90 days): per 100, 90 completed (3 events), 5 retried then
completed (5), 3 dead-lettered (3), 2 pending (1); the histories of 1,000 executions
at a time are interleaved in the log. One job also gets 50,000 events of its own (its
definition changed 50,000 times, with snapshots as the ledger takes them). Then
``ANALYZE``.

Measured:

- ``projections rebuild``: the read models emptied and the whole log replayed;
- ``queue rebuild --full``: the queue rebuilt by folding the whole log;
- API p50 / p99 (``jobledger api`` as a process, a signed-in admin, 100 requests each;
  20 with ``--quick``): executions of one job, dead-lettered executions, executions of
  one day, one execution, one job, the audit log's first page, and the job with 50,000
  events as of a time in the middle of its history;
- disk: bytes per execution of the log, the read models and the checkpoint, with
  their indexes (``pg_total_relation_size``);
- the scheduler's tick with the 10,000 cron jobs (``Scheduler.tick`` in this process,
  always leading, its heap settled as a started role's is): ticks at a minute when
  about 1/60 of the jobs are due, the tick after each (the job index reads the fires),
  and idle ticks, p50 / p99. The occurrences that fell due while the log was built are
  fired first, untimed, as a leader that takes over catches up.

``--only ticks`` builds nothing but the jobs (and ``--events`` executions, none unless
asked) and measures only the ticks: under a minute instead of an hour. ``--only api``
leaves out the ticks and the archive (``--events 3100000`` is about a million runs).

Each run's input names one of 50,000 customers; the API rows include searches of the
runs (a customer, the start of an id, a word no run has, the dead letters' error) and
the dashboard's pages (``page:`` rows; the Accept header asks for JSON, which the pages
ignore: they answer their HTML).

Targets (issue "Scale"): rebuilds >= 100,000 events/s, API p99 <= 100 ms, a tick
(firing or idle) p99 <= 50 ms. The table goes to stdout, progress to stderr, the JSON to
``bench/results/scale.json`` (``scale-quick.json``; ``scale-ticks.json`` with
``--only ticks``).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import psycopg
import redis
from psycopg import sql

from bench import _support as support
from bench.pages import ADMIN, api_process, sign_in
from jobledger.adapters.redis.queue import RedisQueue
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.roles import Role
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.leadership import LocalLeadership
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.projection import CheckpointProjection, QueueProjection
from jobledger.runtime.lifecycle import settle_heap
from jobledger.services.actors import Actor

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import httpx

    from jobledger.persistence.ledger import Ledger
    from jobledger.runtime.scheduler import Scheduler, TickReport

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
SPREAD = timedelta(days=90)
WINDOW = 1000  # executions whose histories are interleaved in the log
MIX = (("completed", 90), ("retried", 5), ("dead", 3), ("pending", 2))
JOB_MARK = uuid.UUID(int=0xB0B0_CAFE)
TIME_MARK = '"@@T@@"'
JOB_TEXT_MARK = f'"{JOB_MARK}"'
# Each run's input names one of CUSTOMERS customers: a search for one finds about
# executions / CUSTOMERS runs.
CUSTOMER_MARK = '"@@C@@"'
CUSTOMERS = 50_000
SAVE_JOBS = 500
TARGET_EVENTS_PER_S = 100_000.0
TARGET_P99_MS = 100.0
TARGET_TICK_MS = 50.0


@dataclass(frozen=True)
class Sizes:
    events: int
    jobs: int
    big_job_events: int
    requests: int
    ticks: int


def sizes(*, quick: bool, events: int | None, only_ticks: bool = False) -> Sizes:
    if only_ticks:
        return Sizes(events or 0, 1_000 if quick else 10_000, 0, 0, 20 if quick else 50)
    if quick:
        return Sizes(events or 200_000, 1_000, 5_000, 20, 20)
    return Sizes(events or 10_000_000, 10_000, 50_000, 100, 50)


@dataclass(frozen=True)
class Row:
    measure: str
    count: int
    seconds: float | None = None
    per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""


# ---- building the log -------------------------------------------------------------------

# One stored event as pieces: the JSON split where a time or the job id goes.
Template = tuple[int, str, list[bytes | str]]


def definition(index: int) -> JobDefinition:
    spec = ExecutionSpec(
        handler="test.echo",
        payload={"n": index},
        queue=("default", "reports")[index % 2],
        retry=RetryPolicy(max_retries=1),
    )
    schedule = CronSchedule(f"{index % 60} * * * *", ZONES[index % len(ZONES)])
    return JobDefinition(name=f"scale {index:05d}", spec=spec, schedule=schedule)


def save_jobs(container: Container, count: int) -> list[uuid.UUID]:
    now = datetime.now(UTC)
    ledger = container.ledger
    ids: list[uuid.UUID] = []
    progress = support.Progress("jobs", count)
    for first in range(0, count, SAVE_JOBS):
        jobs = [
            Job.schedule(definition(i), at=now, by=ADMIN, limits=ledger.limits)
            for i in range(first, min(first + SAVE_JOBS, count))
        ]
        ledger.save_all(*jobs)
        ids += [job.id for job in jobs]
        progress(len(ids))
    return ids


def history(kind: str, now: datetime) -> Execution:
    """One run of ``kind``, recorded by the domain, its job the marker id."""
    retries = 0 if kind == "dead" else 1
    spec = ExecutionSpec(
        handler="test.echo",
        payload={"n": 1, "customer": CUSTOMER_MARK.strip('"')},
        retry=RetryPolicy(max_retries=retries),
    )
    run = Execution.enqueue(spec=spec, ready_at=now, trigger=Trigger.SCHEDULE, job_id=JOB_MARK)
    if kind == "pending":
        return run
    for attempt in range(2 if kind == "retried" else 1):
        lease = uuid.uuid4()
        run.lease(worker_id="w1", lease_id=lease, lease_expires_at=now + timedelta(minutes=5))
        if kind == "dead" or (kind == "retried" and attempt == 0):
            run.fail(lease_id=lease, error="HandlerError: 503", at=now)
        else:
            run.complete(lease_id=lease, duration=timedelta(milliseconds=40), result={"ok": 1})
    return run


_MARKS = re.compile(
    rf"({re.escape(TIME_MARK)}|{re.escape(JOB_TEXT_MARK)}|{re.escape(CUSTOMER_MARK)})"
)


def templates(ledger: Ledger) -> dict[str, list[Template]]:
    """Each kind's stored events with their times and job id as marks."""
    now = datetime.now(UTC)
    found: dict[str, list[Template]] = {}
    for kind, _ in MIX:
        pieces: list[Template] = []
        for event in history(kind, now).collect_events():
            stored = ledger.mapper.to_stored_event(event)
            state = msgspec.json.decode(stored.state)
            for name in ("timestamp", "ready_at", "lease_expires_at", "scheduled_for"):
                if state.get(name) is not None:
                    state[name] = "@@T@@"
            text = msgspec.json.encode(state).decode()
            parts: list[bytes | str] = [
                part if part in {TIME_MARK, JOB_TEXT_MARK, CUSTOMER_MARK} else part.encode()
                for part in _MARKS.split(text)
            ]
            pieces.append((stored.originator_version, stored.topic, parts))
        found[kind] = pieces
    return found


def filled(parts: list[bytes | str], at: bytes, job: bytes, customer: bytes) -> bytes:
    marks = {TIME_MARK: at, JOB_TEXT_MARK: job, CUSTOMER_MARK: customer}
    return b"".join(marks[p] if isinstance(p, str) else p for p in parts)


def customer(index: int) -> str:
    """The customer the ``index``-th run's input names."""
    return f"cust-{index % CUSTOMERS:05d}"


def plan(count: int) -> list[str]:
    slots = [kind for kind, share in MIX for _ in range(share)]
    return [slots[(i * 37) % len(slots)] for i in range(count)]


def event_rows(
    kinds: dict[str, list[Template]], jobs: list[uuid.UUID], total: int
) -> Iterator[tuple[object, ...]]:
    """``total`` events, a window of executions at a time, histories interleaved."""
    start = datetime.now(UTC) - SPREAD
    step = SPREAD / max(total // 3, 1)
    emitted = 0
    order = plan(100)
    for window in itertools.count(0, WINDOW):
        runs = []
        for i in range(window, window + WINDOW):
            at = msgspec.json.encode(start + i * step)
            job = f'"{jobs[i % len(jobs)]}"'.encode()
            named = f'"{customer(i)}"'.encode()
            runs.append((uuid.uuid4(), kinds[order[i % 100]], at, job, named))
        for stage in range(5):
            for execution_id, events, at, job, named in runs:
                if stage < len(events):
                    version, topic, parts = events[stage]
                    yield execution_id, version, topic, filled(parts, at, job, named)
                    emitted += 1
                    if emitted == total:
                        return


def load_executions(container: Container, url: str, jobs: list[uuid.UUID], total: int) -> None:
    kinds = templates(container.ledger)
    statement = sql.SQL(
        "COPY jobledger_events (originator_id, originator_version, topic, state) FROM STDIN"
    )
    progress = support.Progress("log: COPY", total)
    with psycopg.connect(url) as conn, conn.cursor() as cursor, cursor.copy(statement) as copy:
        for done, row in enumerate(event_rows(kinds, jobs, total), 1):
            copy.write_row(row)
            if done % 50_000 == 0:
                progress(done)
        progress(total)


def big_job(container: Container, events: int) -> tuple[uuid.UUID, datetime]:
    """A job whose definition changed ``events`` times; returns it and a time in the
    middle of its history."""
    ledger = container.ledger
    job = Job.schedule(definition(999_999), at=datetime.now(UTC), by=ADMIN, limits=ledger.limits)
    ledger.save_all(job)
    middle = datetime.now(UTC)
    progress = support.Progress("job with many events", events)
    for done in range(1, events):
        revised = msgspec.structs.replace(job.definition, description=f"revision {done}")
        job.update(revised, at=datetime.now(UTC), by=ADMIN, limits=ledger.limits)
        if done % 1000 == 0 or done == events - 1:
            ledger.save_all(job)
            progress(done)
        if done == events // 2:
            middle = datetime.now(UTC)
    return job.id, middle


def analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


# ---- measuring ---------------------------------------------------------------------------


def timed(
    label: str, events: int, run: Callable[[support.Progress], object], *, rebuild: bool = True
) -> Row:
    """``run`` timed over the log; ``rebuild``: the issue's target for rebuilds applies
    (a follower's catch-up from the start is shown without it)."""
    progress = support.Progress(label, events)
    begun = time.perf_counter()
    run(progress)
    seconds = time.perf_counter() - begun
    rate = support.rate(events, seconds)
    support.log(f"{label}: {events:,} events in {seconds:.1f}s = {rate:,.0f}/s")
    if not rebuild:
        return Row(label, events, round(seconds, 2), rate)
    return Row(
        label,
        events,
        round(seconds, 2),
        rate,
        target=f">= {TARGET_EVENTS_PER_S:,.0f} events/s",
        met=rate >= TARGET_EVENTS_PER_S,
    )


def rebuild_rows(container: Container, redis_url: str, events: int) -> list[Row]:
    models = container.read_models()
    read_models = timed(
        "projections rebuild", events, lambda progress: models.rebuild(progress=progress)
    )
    queue = RedisQueue(redis.Redis.from_url(redis_url), prefix="scale-rebuild")
    projection = QueueProjection(container.ledger, queue, store_id=container.store_id)
    full = timed(
        "queue rebuild --full",
        events,
        lambda progress: projection.rebuild(full=True, progress=progress),
    )
    projector = container.projector()
    try:
        checkpoint = timed(
            "checkpoint from the start",
            events,
            lambda p: _follow(projector.checkpoint, p),
            rebuild=False,
        )
    finally:
        projector.close()
    return [read_models, full, checkpoint]


def _follow(follower: CheckpointProjection, progress: support.Progress) -> None:
    while follower.step():
        progress(follower.position or 0)


def latency_row(client: httpx.Client, label: str, path: str, requests: int) -> Row:
    for _ in range(3):
        client.get(path).raise_for_status()
    times = []
    for _ in range(requests):
        begun = time.perf_counter()
        client.get(path).raise_for_status()
        times.append((time.perf_counter() - begun) * 1000)
    times.sort()
    p99 = support.percentile(times, 0.99)
    support.log(f"GET {label}: p50 {support.percentile(times, 0.5):.1f} ms, p99 {p99:.1f} ms")
    return Row(
        f"GET {label}",
        requests,
        p50_ms=round(support.percentile(times, 0.5), 1),
        p99_ms=round(p99, 1),
        target=f"p99 <= {TARGET_P99_MS:g} ms",
        met=p99 <= TARGET_P99_MS,
        note=path,
    )


def api_paths(container: Container, big: tuple[uuid.UUID, datetime]) -> list[tuple[str, str]]:
    with psycopg.connect(container.settings.database_url) as conn:
        row = conn.execute(
            "SELECT id, job_id FROM jobledger_rm_executions WHERE job_id IS NOT NULL LIMIT 1"
        ).fetchone()
    if row is None:
        raise RuntimeError("the read models hold no execution")
    execution_id, job_id = row
    day = (datetime.now(UTC) - timedelta(days=30)).replace(microsecond=0)
    since, until = _z(day), _z(day + timedelta(days=1))
    big_id, middle = big
    return [
        ("executions of one job", f"/api/v1/executions?job_id={job_id}&limit=50"),
        ("dead-lettered executions", "/api/v1/executions?status=dead_lettered&limit=50"),
        ("executions of one day", f"/api/v1/executions?since={since}&until={until}&limit=50"),
        ("one execution", f"/api/v1/executions/{execution_id}"),
        ("one job", f"/api/v1/jobs/{job_id}"),
        ("audit log", "/api/v1/audit/events?limit=50"),
        ("job with many events, as_of", f"/api/v1/jobs/{big_id}?as_of={_z(middle)}"),
        *search_paths(execution_id),
        *page_paths(execution_id, job_id),
    ]


def page_paths(execution_id: str, job_id: str) -> list[tuple[str, str]]:
    """The dashboard's pages over the same runs (server-rendered, a session cookie)."""
    return [
        ("page: overview", "/ui"),
        ("page: jobs", "/ui/jobs"),
        ("page: a job", f"/ui/jobs/{job_id}"),
        ("page: executions", "/ui/executions"),
        ("page: executions, a search", f"/ui/executions?search={customer(4217)}"),
        ("page: a run", f"/ui/executions/{execution_id}"),
        ("page: dead letters", "/ui/dlq"),
        ("page: workflows", "/ui/workflows"),
        ("page: notifications", "/ui/notifications"),
    ]


def search_paths(execution_id: str) -> list[tuple[str, str]]:
    """Searches of the runs (ADR 107): for one customer in the inputs (about
    executions / CUSTOMERS runs), the start of a run's id, a word no run has, and a
    word of every dead letter's error in the dead letters."""
    return [
        ("search: a customer in the inputs", f"/api/v1/executions?search={customer(4217)}"),
        ("search: the start of a run's id", f"/api/v1/executions?search={execution_id[:8]}"),
        ("search: a word no run has", "/api/v1/executions?search=umbrella"),
        ("search: dead letters' error word", "/api/v1/dlq?search=handlererror"),
    ]


def _z(at: datetime) -> str:
    """A time as a query value (a ``+`` would read as a space)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def api_rows(container: Container, big: tuple[uuid.UUID, datetime], requests: int) -> list[Row]:
    paths = api_paths(container, big)
    with tempfile.TemporaryDirectory() as folder, api_process(container.settings, folder) as url:
        client = sign_in(url)
        client.headers["Accept"] = "application/json"
        with contextlib.closing(client):
            return [latency_row(client, label, path, requests) for label, path in paths]


DISK_GROUPS = {
    "log": ("jobledger_events",),
    "read models": (
        "jobledger_rm_executions",
        "jobledger_rm_attempts",
        "jobledger_rm_jobs",
        "jobledger_rm_minute_stats",
        "jobledger_rm_minute_histograms",
        "jobledger_rm_status_counts",
        "jobledger_rm_workflows",
    ),
    "checkpoint": ("jobledger_open_executions",),
}


def disk_rows(url: str, executions: int) -> list[Row]:
    rows = []
    with psycopg.connect(url) as conn:
        for group, tables in DISK_GROUPS.items():
            size = 0
            for table in tables:
                found = conn.execute(
                    "SELECT pg_total_relation_size(to_regclass(%s))", (table,)
                ).fetchone()
                size += int(found[0] or 0) if found else 0
            note = f"{size / 2**20:,.0f} MiB in {', '.join(tables)} (with indexes)"
            rows.append(
                Row(f"disk: {group}", executions, note=note, per_s=round(size / executions, 1))
            )
    return rows


def tick_rows(container: Container, ticks: int) -> list[Row]:
    scheduler = container.scheduler(leadership=LocalLeadership())
    minute = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    late = catch_up(scheduler, minute - timedelta(seconds=1))
    settle_heap()  # what a scheduler process does once started
    busy: list[float] = []
    after: list[float] = []
    idle: list[float] = []
    fired = 0
    for n in range(ticks):
        at = minute + timedelta(minutes=n)
        fired += timed_tick(scheduler, at, busy).jobs
        timed_tick(scheduler, at + timedelta(seconds=20), after)  # the index reads the fires
        timed_tick(scheduler, at + timedelta(seconds=30), idle)
    container.writer.flush()
    support.log(f"ticks: {late:,} late jobs caught up first (untimed)")
    note = f"{fired / ticks:,.0f} jobs fired a tick; {late:,} late ones caught up first"
    return [
        _tick_row("scheduler tick, a minute's jobs due", busy, note),
        _tick_row("scheduler tick after a firing one", after, "the job index reads the fires"),
        _tick_row("scheduler tick, none due", idle, ""),
    ]


def catch_up(scheduler: Scheduler, now: datetime) -> int:
    """Fire, untimed, what fell due while the log was built (up to 500 jobs a tick, late
    ones through their misfire policy), as a leader that takes over does first; returns
    how many jobs had something due."""
    jobs = 0
    while True:
        report = scheduler.tick(now)
        if not report.jobs:
            return jobs
        jobs += report.jobs


def timed_tick(scheduler: Scheduler, at: datetime, times: list[float]) -> TickReport:
    begun = time.perf_counter()
    report = scheduler.tick(at)
    times.append((time.perf_counter() - begun) * 1000)
    return report


def _tick_row(label: str, times: list[float], note: str) -> Row:
    times.sort()
    p99 = support.percentile(times, 0.99)
    support.log(f"{label}: p50 {support.percentile(times, 0.5):.1f} ms, p99 {p99:.1f} ms")
    return Row(
        label,
        len(times),
        p50_ms=round(support.percentile(times, 0.5), 1),
        p99_ms=round(p99, 1),
        target=f"<= {TARGET_TICK_MS:g} ms",
        met=p99 <= TARGET_TICK_MS,
        note=note,
    )


def archive_row(container: Container) -> Row:
    """Archive the closed runs of the older half of the spread: exported, verified and
    removed from the log."""
    archives = container.archives()
    before = datetime.now(UTC) - SPREAD / 2
    by = Actor("bench", Role.ADMIN)
    progress = support.Progress("archive", 0)
    begun = time.perf_counter()
    report = archives.archive(at=datetime.now(UTC), by=by, before=before, progress=progress)
    seconds = time.perf_counter() - begun
    rate = support.rate(report.events, seconds)
    support.log(f"archive: {report.events:,} events in {seconds:.1f}s = {rate:,.0f}/s")
    note = f"{report.executions:,} executions in {len(report.batches):,} archives"
    if report.mark.follower:
        note += f"; held back by {report.mark.follower}"
    return Row(
        "archive (export, verify, remove)", report.events, round(seconds, 2), rate, note=note
    )


# ---- the run -----------------------------------------------------------------------------


def build(container: Container, url: str, size: Sizes) -> tuple[int, tuple[uuid.UUID, datetime]]:
    jobs = save_jobs(container, size.jobs)
    big = big_job(container, size.big_job_events)
    load_executions(container, url, jobs, size.events)
    analyze(url)
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM jobledger_events WHERE topic = %s",
            (Execution.Enqueued.TOPIC,),
        ).fetchone()
    return int(found[0]) if found else 0, big


def ticks_only(container: Container, url: str, size: Sizes) -> list[Row]:
    """The jobs, ``size.events`` executions of them, and the ticks."""
    jobs = save_jobs(container, size.jobs)
    if size.events:
        load_executions(container, url, jobs, size.events)
    analyze(url)
    return tick_rows(container, size.ticks)


def run(
    url: str, redis_url: str, size: Sizes, archives: Path, *, only: str | None = None
) -> list[Row]:
    migrate(load_settings({}, test_handlers="true", database_url=url), progress=support.log)
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=url,
        redis_url=redis_url,
        redis_prefix="scale",
        log_level="warning",
        archive_dir=str(archives),
    )
    configure_logging(settings)
    with bootstrap(settings) as container:
        if only == "ticks":
            return ticks_only(container, url, size)
        executions, big = build(container, url, size)
        events = container.head()
        support.log(f"log: {events:,} events, {executions:,} executions, {size.jobs:,} jobs")
        rows = rebuild_rows(container, redis_url, events)
        analyze(url)
        rows += disk_rows(url, executions)
        rows += api_rows(container, big, size.requests)
        if only == "api":
            return rows
        rows += tick_rows(container, size.ticks)
        rows.append(archive_row(container))
    return rows


COLUMNS = (
    ("measure", "{:<40}"),
    ("count", "{:>10}"),
    ("seconds", "{:>8}"),
    ("per_s", "{:>11}"),
    ("p50_ms", "{:>7}"),
    ("p99_ms", "{:>7}"),
    ("target", "{:<22}"),
    ("met", "{:<4}"),
    ("note", "{}"),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="200,000 events, 1,000 jobs")
    parser.add_argument("--events", type=int, help="events in the log (default 10,000,000)")
    parser.add_argument(
        "--only",
        choices=["ticks", "api"],
        help="ticks: only the scheduler's ticks, over the jobs (and --events executions);"
        " api: the log, its rebuilds, the disk and the API rows, no ticks",
    )
    args = parser.parse_args(argv)
    only_ticks = args.only == "ticks"
    size = sizes(quick=args.quick, events=args.events, only_ticks=only_ticks)
    began = time.perf_counter()
    load_before = support.load_average()
    with (
        support.throwaway_postgres(args.admin_url) as url,
        support.private_redis() as redis_url,
        tempfile.TemporaryDirectory(prefix="jobledger-scale-") as folder,
    ):
        rows = run(url, redis_url, size, Path(folder), only=args.only)
    print(support.format_table(rows, COLUMNS))
    if not only_ticks:
        print("disk rows: per_s is bytes per execution")
    path = support.write_json(
        "scale" + (f"-{args.only}" if args.only else "") + ("-quick" if args.quick else ""),
        {
            "recorded_at": support.recorded_at(),
            "machine": support.machine(),
            "sizes": asdict(size),
            "load_average": {"before": load_before, "after": support.load_average()},
            "seconds": round(time.perf_counter() - began, 1),
            "rows": [asdict(row) for row in rows],
        },
    )
    support.log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
