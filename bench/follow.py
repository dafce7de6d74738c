"""Following the log: the read-model follower beside eventsourcing's projection runner.

Creates a throwaway PostgreSQL database, writes a log of job and execution events
through the ledger, and drops the database at the end, also on an error or Ctrl-C.

    python -m bench.follow [--quick] [--events N] [--prefix N] [--repeat N] [--admin-url URL]

1. reads: the log from 0 to its head as the project reads it (``read_rows``: binary
   tuples, a topic filter, pages) and as eventsourcing does (``select_notifications``:
   ``Notification`` objects; its subscriptions), each with and without decoding.
2. follow: the read models caught up from 0 to the head by ``ReadModels.step`` (pages of
   2,000) and ``ReadModels.rebuild`` (pages of 10,000, read ahead), and by a
   ``Projection`` run through eventsourcing's ``ProjectionRunner`` with a
   ``PostgresTrackingRecorder`` view that applies the same fold to the same tables,
   batching 2,000 or 10,000 events per transaction.
3. per event: the library's documented shape (one view transaction per event) beside
   ``ReadModels`` with pages of one event, over the first ``--prefix`` events.

Every fold run starts from empty tables and must leave them equal (row for row) to the
first run over the same events.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

import psycopg
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresTrackingRecorder
from eventsourcing.projection import ApplicationSubscription, Projection, ProjectionRunner
from psycopg import sql
from psycopg.rows import tuple_row

from bench import _support as support
from jobledger.adapters.postgres.database import _QmarkCursor
from jobledger.adapters.sql.quarantine import SqlQuarantineTable

# The benchmark must run the production fold and cursor, not a copy of them.
from jobledger.adapters.sql.read_models import SqlReadModelTables
from jobledger.adapters.store import migrate, open_ledger, persistence_env, projection_database
from jobledger.bootstrap import read_models_on
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LivePage
from jobledger.projections.collector import collector_paused
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import READ_MODELS_FOLLOWER, Isolation, Quarantine
from jobledger.projections.read_models.follower import POSITION, REPLAY_PAGE, TOPICS
from jobledger.projections.read_models.tables import TABLES

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from eventsourcing.domain import DomainEventProtocol
    from eventsourcing.persistence import Tracking

    from jobledger.domain.execution import Execution
    from jobledger.projections.database import Database

APP = Ledger.name  # the application name the library's tracking rows carry
STEP_PAGE = 2000  # the shipped JOBLEDGER_PROJECTION_PAGE_SIZE
LIBRARY_SELECT = 500  # rows per select of the library's subscriptions (not configurable)
JOBS = 1000
WINDOW = 500  # executions whose histories interleave in the log
SAVE_EVENTS = 2000  # events per ledger.save_events transaction
ACTOR = "bench"
CRONS = ("*/5 * * * *", "0 * * * *", "*/15 * * * *", "30 2 * * *")
PROGRESS_EVERY = 1.0
READ_ROUNDS = 3  # rounds of the reads per round of the folds

# What happens to each execution after it is fired (or, "triggered", run by hand), per
# 20 executions. Every history starts with JobFired (JobTriggered) + ExecutionEnqueued.
MIX = (
    ("completed", 11),  # leased, completed
    ("triggered", 1),  # manual run: leased, completed
    ("retried", 2),  # leased, retried, leased, completed
    ("expired", 1),  # leased, lease expired + retried, leased, completed
    ("dead", 1),  # three attempts failed: leased, retried (x2), dead-lettered
    ("deferred", 1),  # leased, deferred (circuit open), leased, completed
    ("running", 1),  # leased
    ("pending", 1),  # still waiting
    ("cancelled", 1),  # cancelled by an operator
)
STEPS: dict[str, tuple[str, ...]] = {
    "completed": ("lease", "complete"),
    "triggered": ("lease", "complete"),
    "retried": ("lease", "fail", "lease", "complete"),
    "expired": ("lease", "expire", "lease", "complete"),
    "dead": ("lease", "fail", "lease", "fail", "lease", "fail"),
    "deferred": ("lease", "defer", "lease", "complete"),
    "running": ("lease",),
    "pending": (),
    "cancelled": ("cancel",),
}


@dataclass(frozen=True)
class Sizes:
    events: int
    prefix: int  # events of the per-event runs
    repeat: int


def sizes(args: argparse.Namespace) -> Sizes:
    events = args.events or (20_000 if args.quick else 200_000)
    prefix = min(events, args.prefix or (500 if args.quick else 2_000))
    return Sizes(events, prefix, args.repeat or (1 if args.quick else 2))


@dataclass
class Row:
    row: int
    part: str
    path: str
    what: str
    page: str
    events: int
    seconds: float
    events_per_s: float
    commits: int | None = None
    vs: int | None = None  # the row this one is compared with
    ratio: float | None = None  # events_per_s / that row's
    same_tables: bool | None = None
    note: str = ""
    runs: list[float] = field(default_factory=list)  # seconds of every repeat


@dataclass(frozen=True)
class Measured:
    events: int
    seconds: float
    commits: int | None = None


# ---- the log -----------------------------------------------------------------------------


class _Run:
    """One execution driven through its history, one command (one stage) at a time."""

    def __init__(self, execution: Execution, now: datetime) -> None:
        self.execution = execution
        self.now = now
        self.lease_id = uuid.uuid4()

    def lease(self) -> None:
        self.lease_id = uuid.uuid4()
        deadline = self.now + timedelta(minutes=5)
        self.execution.lease(worker_id="w-1", lease_id=self.lease_id, lease_expires_at=deadline)

    def complete(self) -> None:
        duration = timedelta(milliseconds=40 + self.lease_id.int % 900)
        self.execution.complete(lease_id=self.lease_id, duration=duration, result={"rows": 7})

    def fail(self) -> None:
        error = "HandlerError: upstream said 503"
        self.execution.fail(lease_id=self.lease_id, error=error, at=self.now, rand=0.5)

    def expire(self) -> None:
        self.execution.expire_lease(lease_id=self.lease_id, at=self.now, rand=0.5)

    def defer(self) -> None:
        self.execution.defer(lease_id=self.lease_id, reason="circuit open", ready_at=self.now)

    def cancel(self) -> None:
        self.execution.cancel(by=ACTOR, reason="not needed")


Stage = list["DomainEventProtocol[uuid.UUID]"]


def history(job: Job, kind: str, index: int, now: datetime) -> list[Stage]:
    """The events of one execution's life, by stage: each stage is one transaction."""
    if kind == "triggered":
        execution = job.trigger(trigger_key=f"bench-{index}", at=now, by=ACTOR)
    else:
        assert job.next_fire_at is not None  # noqa: S101 (the bench's jobs never pause)
        execution = job.fire(scheduled_for=job.next_fire_at, leader_epoch=1, at=now)
    stages: list[Stage] = [[*job.collect_events(), *execution.collect_events()]]
    run = _Run(execution, now)
    for step in STEPS[kind]:
        getattr(run, step)()
        stages.append(list(execution.collect_events()))
    return stages


def new_jobs(now: datetime) -> list[Job]:
    jobs = []
    for index in range(JOBS):
        spec = ExecutionSpec(
            handler=("reports.render", "mail.send", "http.webhook")[index % 3],
            payload={"account": 1000 + index, "format": "pdf"},
            queue=("default", "reports")[index % 2],
            priority=index % 10,
            retry=RetryPolicy(max_retries=2),
        )
        schedule = CronSchedule(CRONS[index % len(CRONS)], ("UTC", "Europe/Berlin")[index % 2])
        definition = JobDefinition(name=f"report {index:04d}", spec=spec, schedule=schedule)
        jobs.append(Job.schedule(definition, at=now, by=ACTOR))
    return jobs


def log_events(jobs: Sequence[Job], now: datetime) -> Iterator[DomainEventProtocol[uuid.UUID]]:
    """The jobs' creation, then windows of executions whose stages interleave (every
    fire, then every first lease...), so a history spans pages as it does in a log."""
    for job in jobs:
        yield from job.collect_events()
    kinds = [kind for kind, share in MIX for _ in range(share)]
    for start in itertools.count(0, WINDOW):
        window = [
            history(jobs[i % len(jobs)], kinds[i % len(kinds)], i, now)
            for i in range(start, start + WINDOW)
        ]
        for stage in range(max(len(stages) for stages in window)):
            for stages in window:
                if stage < len(stages):
                    yield from stages[stage]


def write_log(ledger: Ledger, url: str, total: int) -> float:
    """``total`` events through ``ledger.save_events``; returns the seconds it took."""
    progress = support.Progress("log: saved", total)
    begun = time.perf_counter()
    events = log_events(new_jobs(datetime.now(UTC)), datetime.now(UTC))
    written = 0
    while written < total:
        chunk = list(itertools.islice(events, min(SAVE_EVENTS, total - written)))
        ledger.save_events(chunk)
        written += len(chunk)
        progress(written)
    seconds = time.perf_counter() - begun
    with psycopg.connect(url, autocommit=True) as conn:
        # Hint bits and the visibility map set, statistics fresh: no run pays for them.
        conn.execute("VACUUM (ANALYZE) jobledger_events")
    return seconds


# ---- tables: reset and compare -------------------------------------------------------------


def tracking_table(projection: type[Projection[Any]]) -> str:
    return f"{projection.name.lower()}_tracking"


def reset(url: str) -> None:
    """Empty read models, no position, no library tracking for the log, fresh statistics."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = sql.SQL(", ").join(sql.Identifier(table) for table in TABLES)
        conn.execute(sql.SQL("TRUNCATE {}").format(tables))
        conn.execute("DELETE FROM jobledger_positions WHERE name = %s", (POSITION,))
        for projection in (PerEvent, Batched):
            name = tracking_table(projection)
            row = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
            if row is not None and row[0] is not None:
                # Not TRUNCATE: the recorder's migration marker row must stay.
                delete = sql.SQL("DELETE FROM {} WHERE application_name = %s")
                conn.execute(delete.format(sql.Identifier(name)), (APP,))
        conn.execute(sql.SQL("ANALYZE {}").format(tables))


# ---- 1. reads --------------------------------------------------------------------------------


def read_ours(ledger: Ledger, page: int, *, decode: bool) -> Measured:
    reader = LogReader(ledger, page, topics=TOPICS)
    begun = time.perf_counter()
    position = count = 0
    while True:
        found = ledger.log_store.read_rows(position, LivePage(page, TOPICS))
        if found.position == position:
            break
        if decode:
            for _event in reader.events(found.rows):
                count += 1
        else:
            count += len(found.rows)
        position = found.position
    return Measured(count, time.perf_counter() - begun)


def read_library(ledger: Ledger, page: int, *, decode: bool) -> Measured:
    recorder = ledger.recorder
    begun = time.perf_counter()
    position = count = 0
    while notifications := recorder.select_notifications(
        start=position, limit=page, topics=TOPICS, inclusive_of_start=False
    ):
        if decode:
            for notification in notifications:
                ledger.mapper.to_domain_event(notification)
        count += len(notifications)
        position = notifications[-1].id
    return Measured(count, time.perf_counter() - begun)


def read_subscription(ledger: Ledger, head: int) -> Measured:
    """The recorder's subscription (a pull thread and a LISTEN thread), no decoding."""
    begun = time.perf_counter()
    count = 0
    with ledger.recorder.subscribe(gt=0, topics=TOPICS) as subscription:
        for notification in subscription:
            count += 1
            if notification.id >= head:
                break
    return Measured(count, time.perf_counter() - begun)


def read_application_subscription(ledger: Ledger, head: int) -> Measured:
    """What ``ProjectionRunner`` iterates: domain events with their ``Tracking``."""
    begun = time.perf_counter()
    count = 0
    with ApplicationSubscription(ledger, gt=0, topics=TOPICS) as subscription:
        for _event, tracking in subscription:
            count += 1
            if tracking.notification_id >= head:
                break
    return Measured(count, time.perf_counter() - begun)


# ---- 2. and 3. following: the project's follower ---------------------------------------------


def follow_steps(ledger: Ledger, database: Database, page: int, stop: int) -> Measured:
    """``ReadModels.step`` until the position reaches ``stop`` (every event is of its
    topics, so a page of one moves it by one)."""
    isolation = Isolation(READ_MODELS_FOLLOWER, Quarantine(SqlQuarantineTable(database)))
    models = read_models_on(
        ledger,
        database,
        page_size=page,
        isolation=isolation,
    )
    progress = support.Progress(f"ReadModels.step page={page}", stop)
    begun = last = time.perf_counter()
    pages = 0
    while (page > 1 or pages < stop) and models.step():
        pages += 1
        if time.perf_counter() - last >= PROGRESS_EVERY:
            last = time.perf_counter()
            progress(models.position())
    seconds = time.perf_counter() - begun
    position = models.position()
    progress(position)
    return Measured(position, seconds, pages)


def follow_rebuild(ledger: Ledger, database: Database) -> Measured:
    isolation = Isolation(READ_MODELS_FOLLOWER, Quarantine(SqlQuarantineTable(database)))
    models = read_models_on(
        ledger,
        database,
        page_size=STEP_PAGE,
        isolation=isolation,
    )
    head = ledger.recorder.max_notification_id() or 0
    begun = time.perf_counter()
    events = models.rebuild(support.Progress("ReadModels.rebuild", head))
    return Measured(events, time.perf_counter() - begun, math.ceil(events / REPLAY_PAGE))


# ---- 2. and 3. following: eventsourcing's projection machinery --------------------------------


class ReadModelsView(PostgresTrackingRecorder):
    """The read-model tables as the library's materialised view: the production fold of
    some events and the tracking record, in one transaction of the view's datastore."""

    # The fold's reads and writes go through the view's own connection: the tables'
    # database (used only by a prune) is never opened.
    tables: ClassVar[SqlReadModelTables] = SqlReadModelTables(cast("Database", None))

    def apply(self, events: Sequence[tuple[str, Any]], tracking: Tracking) -> None:
        with self.datastore.get_connection() as conn, conn.transaction():
            with conn.cursor(row_factory=tuple_row) as raw:
                cursor = _QmarkCursor(conn, raw)
                fold = self.tables.read_fold(cursor, events)
                for key, event in events:
                    fold.apply(key, event)
                self.tables.write_fold(cursor, fold)
            with conn.cursor() as curs:
                # Raises IntegrityError if this or a later position is recorded already.
                self._insert_tracking(curs, tracking)


class _Followed(Projection[ReadModelsView]):
    """A projection that stops at ``last_id`` and says when it committed it.

    ``last_id`` is set before a run: the runner builds the projection itself.
    """

    topics = TOPICS
    last_id: ClassVar[int] = 0

    def __init__(self, view: ReadModelsView) -> None:
        super().__init__(view)
        self.done = threading.Event()
        self.finished_at = 0.0
        self.commits = 0
        self.events = 0

    def _committed(self, tracking: Tracking, events: int) -> None:
        self.commits += 1
        self.events += events
        if tracking.notification_id >= self.last_id:
            self.finished_at = time.perf_counter()
            self.done.set()


class PerEvent(_Followed):
    """The library's documented shape: each event, with its tracking, in a transaction."""

    name = "bench_rm_per_event"

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:  # noqa: ANN401 (any event)
        if tracking.notification_id > self.last_id:
            return
        self.view.apply([(str(domain_event.originator_id), domain_event)], tracking)
        self._committed(tracking, 1)


class Batched(_Followed):
    """Events gathered into one transaction per ``batch``, tracked by the last one. It
    flushes when full, or at ``last_id``: a production follower would need a timer."""

    name = "bench_rm_batched"
    batch: ClassVar[int] = STEP_PAGE

    def __init__(self, view: ReadModelsView) -> None:
        super().__init__(view)
        self.pending: list[tuple[str, Any]] = []

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:  # noqa: ANN401 (any event)
        if tracking.notification_id > self.last_id:
            return
        self.pending.append((str(domain_event.originator_id), domain_event))
        if len(self.pending) >= self.batch or tracking.notification_id >= self.last_id:
            self.view.apply(self.pending, tracking)
            self._committed(tracking, len(self.pending))
            self.pending = []


def run_library(projection: type[_Followed], env: dict[str, str], last_id: int) -> Measured:
    """Run ``projection`` through ``ProjectionRunner`` from the start of the log until it
    committed ``last_id``. The runner's start (an application, two pools, LISTEN) is
    timed with it."""
    projection.last_id = last_id
    env = {**env, f"{projection.name.upper()}_CREATE_TABLE": "y"}
    progress = support.Progress(f"ProjectionRunner {projection.__name__}", last_id)
    begun = time.perf_counter()
    runner = ProjectionRunner(
        application_class=Ledger,
        projection_class=projection,
        view_class=ReadModelsView,
        env=env,
    )
    with runner:  # leaving it raises what stopped the runner's thread, if anything
        followed = runner.projection
        if not isinstance(followed, _Followed):
            raise TypeError(f"the runner built a {type(followed).__name__}")
        while not followed.done.wait(PROGRESS_EVERY) and not runner.is_interrupted.is_set():
            progress(runner.view.max_tracking_id(APP) or 0)
    if not followed.done.is_set():
        raise RuntimeError(f"{projection.__name__} stopped before position {last_id}")
    progress(last_id)
    return Measured(followed.events, followed.finished_at - begun, followed.commits)


def library_batched(env: dict[str, str], batch: int, last_id: int) -> Measured:
    Batched.batch = batch
    return run_library(Batched, env, last_id)


# ---- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    part: str
    path: str
    what: str
    page: str
    measure: Callable[[], Measured]
    vs: int | None = None  # index of the case it is compared with
    folds: bool = False  # writes the read models: reset before, compared after
    note: str = ""


@dataclass
class Tally:
    """The runs of one case: the fastest, every time, and whether its tables matched."""

    best: Measured | None = None
    runs: list[float] = field(default_factory=list)
    same_tables: bool | None = None

    def add(self, measured: Measured) -> None:
        self.runs.append(round(measured.seconds, 3))
        if self.best is None or measured.seconds < self.best.seconds:
            self.best = measured

    @property
    def per_s(self) -> float:
        return 0.0 if self.best is None else support.rate(self.best.events, self.best.seconds)


class Runner:
    """Runs cases ``repeat`` times (every other round in reverse order, so that neither
    side always goes first) and keeps the fastest run of each."""

    def __init__(self, url: str, repeat: int) -> None:
        self.url = url
        self.repeat = repeat
        self.reference: dict[str, str] | None = None

    def run(self, cases: Sequence[Case], first: int) -> list[Row]:
        """One row per case, numbered from ``first``; fold cases are compared with the
        first fold run of this call."""
        tallies = [Tally() for _ in cases]
        self.reference = None
        order = list(range(len(cases)))
        for round_number in range(self.repeat):
            for index in order if round_number % 2 == 0 else reversed(order):
                self._one(cases[index], tallies[index])
        return [self._row(first, i, case, tallies) for i, case in enumerate(cases)]

    def _one(self, case: Case, tally: Tally) -> None:
        label = f"{case.path} {case.what} page={case.page}"
        if case.folds:
            reset(self.url)
        support.log(f"{label}: start")
        measured = case.measure()
        per_s = support.rate(measured.events, measured.seconds)
        support.log(
            f"{label}: {measured.events:,} events in {measured.seconds:.2f}s = {per_s:,.0f}/s"
        )
        tally.add(measured)
        if case.folds:
            found = support.fingerprint(self.url)
            self.reference = self.reference or found
            tally.same_tables = tally.same_tables is not False and found == self.reference

    @staticmethod
    def _row(first: int, index: int, case: Case, tallies: Sequence[Tally]) -> Row:
        tally = tallies[index]
        if tally.best is None:
            raise RuntimeError(f"{case.what} was never measured")
        versus = None if case.vs is None else tallies[case.vs]
        return Row(
            row=first + index,
            part=case.part,
            path=case.path,
            what=case.what,
            page=case.page,
            events=tally.best.events,
            seconds=round(tally.best.seconds, 3),
            events_per_s=tally.per_s,
            commits=tally.best.commits,
            vs=None if case.vs is None else first + case.vs,
            ratio=None if versus is None else round(tally.per_s / versus.per_s, 3),
            same_tables=tally.same_tables,
            note=case.note,
            runs=tally.runs,
        )


def read_cases(ledger: Ledger, head: int) -> list[Case]:
    ours = functools.partial(read_ours, ledger)
    library = functools.partial(read_library, ledger)
    table: list[tuple[str, str, int, Callable[[], Measured], int | None, str]] = [
        ("ours", "read_rows", STEP_PAGE, lambda: ours(STEP_PAGE, decode=False), None, ""),
        ("ours", "read_rows+decode", STEP_PAGE, lambda: ours(STEP_PAGE, decode=True), None, ""),
        ("ours", "read_rows+decode", REPLAY_PAGE, lambda: ours(REPLAY_PAGE, decode=True), None, ""),
        (
            "library",
            "select_notifications",
            STEP_PAGE,
            lambda: library(STEP_PAGE, decode=False),
            0,
            "Notification objects from dict rows",
        ),
        (
            "library",
            "select_notifications+decode",
            STEP_PAGE,
            lambda: library(STEP_PAGE, decode=True),
            1,
            "",
        ),
        (
            "library",
            "select_notifications+decode",
            REPLAY_PAGE,
            lambda: library(REPLAY_PAGE, decode=True),
            2,
            "",
        ),
        (
            "library",
            "select_notifications+decode",
            LIBRARY_SELECT,
            lambda: library(LIBRARY_SELECT, decode=True),
            1,
            "the page its subscriptions use",
        ),
        (
            "library",
            "recorder.subscribe",
            LIBRARY_SELECT,
            lambda: read_subscription(ledger, head),
            0,
            "pull thread (10 pages ahead) + LISTEN thread",
        ),
        (
            "library",
            "ApplicationSubscription",
            LIBRARY_SELECT,
            lambda: read_application_subscription(ledger, head),
            1,
            "what ProjectionRunner iterates: decoded, with Tracking",
        ),
    ]
    return [
        Case("read", path, what, f"{page:,}", measure, vs=vs, note=note)
        for path, what, page, measure, vs, note in table
    ]


def follow_cases(ledger: Ledger, database: Database, env: dict[str, str], head: int) -> list[Case]:
    def paused_batched() -> Measured:
        with collector_paused():  # as the rebuild it is compared with
            return library_batched(env, REPLAY_PAGE, head)

    return [
        Case(
            "follow",
            "ours",
            "ReadModels.step",
            f"{STEP_PAGE:,}",
            lambda: follow_steps(ledger, database, STEP_PAGE, head),
            folds=True,
            note="per page: position read, quarantine check, claim, fold, position",
        ),
        Case(
            "follow",
            "library",
            "ProjectionRunner, batched",
            f"{STEP_PAGE:,}",
            lambda: library_batched(env, STEP_PAGE, head),
            vs=0,
            folds=True,
            note=f"selects {LIBRARY_SELECT}; flush at {STEP_PAGE:,} or the head",
        ),
        Case(
            "follow",
            "ours",
            "ReadModels.rebuild",
            f"{REPLAY_PAGE:,}",
            lambda: follow_rebuild(ledger, database),
            folds=True,
            note="a page read ahead, gc paused",
        ),
        Case(
            "follow",
            "library",
            "ProjectionRunner, batched",
            f"{REPLAY_PAGE:,}",
            paused_batched,
            vs=2,
            folds=True,
            note=f"selects {LIBRARY_SELECT} (10 ahead); gc paused",
        ),
    ]


def per_event_cases(
    ledger: Ledger, database: Database, env: dict[str, str], prefix_id: int
) -> list[Case]:
    return [
        Case(
            "per event",
            "ours",
            "ReadModels.step",
            "1",
            lambda: follow_steps(ledger, database, 1, prefix_id),
            folds=True,
            note="first events of the log",
        ),
        Case(
            "per event",
            "library",
            "ProjectionRunner, per event",
            "1",
            lambda: run_library(PerEvent, env, prefix_id),
            vs=0,
            folds=True,
            note="one view transaction per event",
        ),
    ]


def nth_id(url: str, count: int) -> int:
    """The notification id of the ``count``-th event of the log."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT notification_id FROM jobledger_events ORDER BY notification_id"
            " OFFSET %s LIMIT 1",
            (count - 1,),
        ).fetchone()
    if row is None:
        raise RuntimeError(f"the log has fewer than {count:,} events")
    return int(row[0])


@dataclass(frozen=True)
class Result:
    rows: list[Row]
    store: str
    write_seconds: float
    head: int


def run_all(url: str, size: Sizes) -> Result:
    settings = load_settings({}, test_handlers="true", database_url=url, log_level="warning")
    migrate(settings, progress=support.log)
    configure_logging(settings)
    store = support.postgres_version(url)
    support.log(f"store: {store}; load average {support.load_average()}")
    ledger = open_ledger(settings)
    database = projection_database(settings)
    env = persistence_env(settings)
    try:
        write_seconds = write_log(ledger, url, size.events)
        head = ledger.recorder.max_notification_id() or 0
        if not isinstance(ledger.recorder, PostgresApplicationRecorder):
            raise TypeError("the ledger does not record in PostgreSQL")
        # Reads take a second or two: more rounds of them cost little and steady them.
        rows = Runner(url, READ_ROUNDS * size.repeat).run(read_cases(ledger, head), 1)
        runner = Runner(url, size.repeat)
        rows += runner.run(follow_cases(ledger, database, env, head), len(rows) + 1)
        prefix_id = nth_id(url, size.prefix)
        rows += runner.run(per_event_cases(ledger, database, env, prefix_id), len(rows) + 1)
    finally:
        database.close()
        ledger.close()
    return Result(rows, store, round(write_seconds, 1), head)


# ---- output ----------------------------------------------------------------------------------

COLUMNS: support.Columns = (
    ("row", "{:>3}"),
    ("part", "{:<9}"),
    ("path", "{:<7}"),
    ("what", "{:<27}"),
    ("page", "{:>6}"),
    ("events", "{:>8}"),
    ("seconds", "{:>7}"),
    ("events_per_s", "{:>12}"),
    ("commits", "{:>7}"),
    ("vs", "{:>3}"),
    ("ratio", "{:>5}"),
    ("same_tables", "{:<11}"),
    ("note", "{}"),
)


def show(value: object) -> str:
    """As ``support.show``, but ints with separators, large floats without decimals and
    ratios with three."""
    if isinstance(value, float) and value >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, float) and value < 10:
        return f"{value:.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return support.show(value)


def summary(rows: Sequence[Row]) -> str:
    """Each library follower against the shipped follower's pace."""
    step = next(row for row in rows if row.part == "follow" and row.what == "ReadModels.step")
    lines = []
    for row in rows:
        if row.path == "library" and row.part != "read":
            times = row.events_per_s / step.events_per_s
            lines.append(
                f"row {row.row} ({row.what}, page {row.page}): {row.events_per_s:,.0f} events/s,"
                f" {times:.3f} x ReadModels.step (row {step.row})"
            )
    return "\n".join(lines)


def write_json(result: Result, size: Sizes, *, quick: bool, load_before: list[float]) -> Path:
    stem = f"follow{'-quick' if quick else ''}"
    document = {
        "benchmark": "follow",
        "recorded_at": support.recorded_at(),
        "store": result.store,
        "quick": quick,
        **support.machine(),
        "load_average_before": load_before,
        "load_average_after": support.load_average(),
        "sizes": asdict(size),
        "log": {
            "events": result.head,
            "jobs": JOBS,
            "window": WINDOW,
            "mix_per_20_executions": dict(MIX),
            "write_seconds": result.write_seconds,
            "write": f"ledger.save_events, {SAVE_EVENTS} events per transaction",
        },
        "rows": [asdict(row) for row in result.rows],
    }
    return support.write_json(stem, document)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="20,000 events, one round")
    parser.add_argument("--events", type=int, help="events in the log (default 200,000)")
    parser.add_argument("--prefix", type=int, help="events of the per-event runs (default 2,000)")
    parser.add_argument(
        "--repeat", type=int, help="rounds of every measurement; the fastest counts (default 2)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = sizes(args)
    load_before = support.load_average()
    try:
        with support.throwaway_postgres(args.admin_url) as url:
            result = run_all(url, size)
    except KeyboardInterrupt:
        support.log("interrupted; the database was dropped")
        return 130
    print(
        f"{result.head:,} events ({JOBS:,} jobs, their executions; written in"
        f" {result.write_seconds}s); fastest of {size.repeat} round(s)\n"
    )
    print(support.format_table(result.rows, COLUMNS, show))
    print(f"\n{summary(result.rows)}")
    path = write_json(result, size, quick=args.quick, load_before=load_before)
    print(f"\nJSON: {path}")
    return 0 if all(row.same_tables is not False for row in result.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
