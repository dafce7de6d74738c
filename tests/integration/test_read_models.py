"""The read models: a fold of the log kept in SQL, equal to a rebuild, and queried by the
API. Every test runs on SQLite and on PostgreSQL."""

import contextlib
import functools
import os
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog
from eventsourcing.domain import CanCreateTimestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import actor

from jobledger.adapters.sql.checkpoint import SqlCheckpoint
from jobledger.adapters.sql.read_model_queries import SqlReadModelQueries
from jobledger.adapters.store import migrate, open_ledger, projection_database
from jobledger.bootstrap import read_models_on
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import DomainError
from jobledger.domain.execution import (
    PERMANENT_FAILURE,
    Execution,
    Trigger,
    expiry_reason,
    step_execution_id,
)
from jobledger.domain.policies import MisfirePolicy, OnFailure, RetryPolicy
from jobledger.domain.schedules import (
    CronSchedule,
    ManualSchedule,
    MissedFires,
    OneShotSchedule,
    Schedule,
)
from jobledger.domain.workflow import StepSpec, StepStatus
from jobledger.infra.settings import Settings, load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.database import Database
from jobledger.projections.log.reader import part_of
from jobledger.projections.queue.backend import QueuePause
from jobledger.projections.read_models import replay as read_model_replay
from jobledger.projections.read_models.follower import POSITION, ReadModels
from jobledger.projections.read_models.parts import Part
from jobledger.projections.read_models.queries import CursorError, JobRow, Page
from jobledger.projections.read_models.rebuild import MARK, ShadowRebuild
from jobledger.projections.read_models.tables import (
    ATTEMPTS,
    EXECUTIONS,
    HISTOGRAMS,
    JOBS,
    MINUTE_STATS,
    STATUS_COUNTS,
)
from jobledger.projections.read_models.workflows import WORKFLOWS
from jobledger.runtime.rebuild_processes import ProcessParts, RunningProcesses
from jobledger.schemas.jobs import CronIn
from jobledger.services.bodies import from_definition
from jobledger.services.executions import Executions
from jobledger.services.jobs import Jobs
from jobledger.services.workflows import Workflows

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def reads(database: Database) -> SqlReadModelQueries:
    """The read models' queries on ``database``."""
    return SqlReadModelQueries(database)


# The jobs as the use cases read them: each definition in the API's shape.
def list_jobs(database: Database, **filters: Any) -> Page:
    return reads(database).list_jobs(present=from_definition, **filters)


def get_job(database: Database, job_id: uuid.UUID) -> JobRow | None:
    return reads(database).get_job(job_id, present=from_definition)


_ORDER = {
    JOBS: "id",
    EXECUTIONS: "id",
    ATTEMPTS: "execution_id, seq",
    MINUTE_STATS: "minute_ms",
    HISTOGRAMS: "minute_ms, metric, bucket",
    STATUS_COUNTS: "kind, status",
    WORKFLOWS: "id",
}


class Clock:
    """The time every new event gets (eventsourcing asks ``create_timestamp``)."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def at(self, moment: datetime) -> None:
        self.now = moment


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(T0)
    monkeypatch.setattr(CanCreateTimestamp, "create_timestamp", staticmethod(clock))
    return clock


@pytest.fixture
def database(store_settings: Settings) -> Iterator[Database]:
    database = projection_database(store_settings)
    yield database
    database.close()


class Story:
    """Commands on the ledger at the clock's time; the clock moves a second per command
    unless a command says when it happens."""

    def __init__(self, ledger: Ledger, clock: Clock) -> None:
        self.ledger = ledger
        self.clock = clock

    def tick(self, at: datetime | None = None) -> datetime:
        self.clock.at(at or self.clock.now + timedelta(seconds=1))
        return self.clock.now

    def schedule(self, name: str, schedule: Schedule = ManualSchedule(), **spec: Any) -> uuid.UUID:
        definition = JobDefinition(name=name, spec=_spec(**spec), schedule=schedule)
        return Jobs(self.ledger).schedule(definition, at=self.tick(), by=actor("alice")).id

    def update(self, job_id: uuid.UUID, name: str, **spec: Any) -> None:
        old = self.ledger.get_job(job_id).definition
        definition = JobDefinition(name=name, spec=_spec(**spec), schedule=old.schedule)
        Jobs(self.ledger).update(job_id, definition, at=self.tick(), by=actor("bob"))

    def fire(self, job_id: uuid.UUID, *, late: timedelta = timedelta(seconds=2)) -> uuid.UUID:
        job = self.ledger.get_job(job_id)
        assert job.next_fire_at is not None
        due = job.next_fire_at
        execution = job.fire(scheduled_for=due, leader_epoch=1, at=self.tick(due + late))
        self.ledger.save_all(job, execution)
        return execution.id

    def miss(self, job_id: uuid.UUID, count: int) -> None:
        job = self.ledger.get_job(job_id)
        assert job.next_fire_at is not None
        last = job.next_fire_at + timedelta(minutes=count - 1)
        self.tick(last + timedelta(seconds=1))
        missed = MissedFires(first=job.next_fire_at, last=last, count=count)
        job.record_missed_fires(missed, policy=MisfirePolicy.SKIP)
        self.ledger.save_all(job)

    def trigger(self, job_id: uuid.UUID, key: str) -> uuid.UUID:
        return Jobs(self.ledger).trigger(job_id, key=key, at=self.tick(), by=actor("carol")).id

    def adhoc(self, key: str, at: datetime | None = None, **spec: Any) -> uuid.UUID:
        return Executions(self.ledger).run(_spec(**spec), key=key, at=self.tick(at), by=actor()).id

    def act(
        self, execution_id: uuid.UUID, command: Callable[[Execution], None], at: datetime | None
    ) -> None:
        execution = self.ledger.get_execution(execution_id)
        self.tick(at)
        command(execution)
        self.ledger.save_all(execution)

    def lease(
        self, execution_id: uuid.UUID, worker: str = "w1", at: datetime | None = None
    ) -> None:
        def lease(e: Execution) -> None:
            e.lease(worker_id=worker, lease_id=uuid.uuid4(), lease_expires_at=self.clock.now)

        self.act(execution_id, lease, at)

    def complete(self, execution_id: uuid.UUID, ms: float, at: datetime | None = None) -> None:
        def complete(e: Execution) -> None:
            duration = timedelta(milliseconds=ms)
            e.complete(lease_id=_lease(e), duration=duration, result={"ms": ms})

        self.act(execution_id, complete, at)

    def fail(self, execution_id: uuid.UUID, error: str, at: datetime | None = None) -> None:
        def fail(e: Execution) -> None:
            e.fail(lease_id=_lease(e), error=error, at=self.clock.now)

        self.act(execution_id, fail, at)

    def expire(self, execution_id: uuid.UUID) -> None:
        def expire(e: Execution) -> None:
            e.expire_lease(lease_id=_lease(e), at=self.clock.now)

        self.act(execution_id, expire, None)

    def defer(self, execution_id: uuid.UUID) -> None:
        def defer(e: Execution) -> None:
            e.defer(lease_id=_lease(e), reason="circuit open", ready_at=self.clock.now)

        self.act(execution_id, defer, None)

    def requeue(self, execution_id: uuid.UUID) -> None:
        self.act(
            execution_id, lambda e: e.requeue(by="dave", reason="fixed", at=self.clock.now), None
        )

    def cancel(self, execution_id: uuid.UUID) -> None:
        self.act(execution_id, lambda e: e.cancel(by="erin", reason="not needed"), None)

    def discard(self, execution_id: uuid.UUID) -> None:
        self.act(execution_id, lambda e: e.discard(by="frank", reason="endpoint gone"), None)

    def snooze(self, execution_id: uuid.UUID) -> None:
        def snooze(e: Execution) -> None:
            e.snooze(lease_id=_lease(e), reason="not yet", delay=timedelta(0), at=self.clock.now)

        self.act(execution_id, snooze, None)

    def fail_permanently(self, execution_id: uuid.UUID) -> None:
        self.act(execution_id, lambda e: e.fail_permanently(lease_id=_lease(e), error="bad"), None)

    def drop(self, execution_id: uuid.UUID) -> None:
        self.act(execution_id, lambda e: e.drop(lease_id=_lease(e), reason="moot"), None)

    def start_workflow(
        self, name: str, steps: list[StepSpec], on_failure: OnFailure = OnFailure.STOP
    ) -> uuid.UUID:
        flows = Workflows(self.ledger)
        return flows.start(
            name=name, steps=steps, on_failure=on_failure, at=self.tick(), by=actor("grace")
        ).id

    def run_step(self, workflow_id: uuid.UUID, step: str, ms: float | None) -> None:
        """The step's run completes in ``ms`` (dies, with None), and the workflow records
        how it ended, as the scheduler's releases do."""
        run = step_execution_id(workflow_id, step)
        self.lease(run)
        if ms is None:
            self.fail(run, "boom")
        else:
            self.complete(run, ms)
        self.settle(workflow_id, step, StepStatus.FAILED if ms is None else StepStatus.COMPLETED)

    def settle(self, workflow_id: uuid.UUID, step: str, status: StepStatus) -> None:
        workflow = self.ledger.get_workflow(workflow_id)
        run = self.ledger.get_execution(step_execution_id(workflow_id, step))
        released = workflow.settle(
            step, status=status, result=run.result, error=run.last_error, at=self.tick()
        )
        self.ledger.save_all(workflow, *released)


def _lease(execution: Execution) -> uuid.UUID:
    """The current lease; without one, a made-up lease that the execution refuses as stale."""
    return execution.lease_id or uuid.uuid4()


def _spec(
    handler: str = "test.echo", queue: str = "default", priority: int = 5, retries: int = 3
) -> ExecutionSpec:
    retry = RetryPolicy(max_retries=retries, jitter=False)
    return ExecutionSpec(handler=handler, queue=queue, priority=priority, retry=retry)


# ---- a varied log -----------------------------------------------------------------


def cron_job_runs(story: Story) -> dict[str, uuid.UUID]:
    """A cron job: one run completes; the next dead-letters and is discarded."""
    job = story.schedule("alpha", CronSchedule("*/5 * * * *"), retries=1)
    done = story.fire(job)
    story.lease(done)
    story.complete(done, 12.5)
    dead = story.fire(job)
    story.lease(dead)
    story.fail(dead, "HTTP 503")
    story.lease(dead, worker="w2")
    story.fail(dead, "HTTP 502")
    story.discard(dead)
    return {"alpha": job, "alpha_done": done, "alpha_dead": dead}


def job_lifecycle(story: Story) -> dict[str, uuid.UUID]:
    """Updated, paused, resumed; a run deferred, then expired, then completed; a
    manual run cancelled before it started."""
    job = story.schedule("beta", CronSchedule("0 * * * *", "Europe/Berlin"), handler="http.webhook")
    story.update(job, "beta v2", handler="http.webhook", queue="hooks", priority=8)
    Jobs(story.ledger).pause(job, by=actor("bob"), reason="maintenance")
    Jobs(story.ledger).resume(job, at=story.tick(), by=actor("bob"))
    run = story.fire(job)
    story.lease(run)
    story.defer(run)
    story.lease(run)
    story.expire(run)
    story.lease(run, worker="w3")
    story.complete(run, 250)
    manual = story.trigger(job, "manual-1")
    story.cancel(manual)
    return {"beta": job, "beta_run": run, "beta_manual": manual}


def one_shot_requeued(story: Story) -> dict[str, uuid.UUID]:
    """A one-shot job whose run dies of a lease expiry, is requeued and completes."""
    job = story.schedule(
        "gamma", OneShotSchedule(story.clock.now + timedelta(minutes=7)), retries=0
    )
    run = story.fire(job)
    story.lease(run)
    story.expire(run)
    story.requeue(run)
    story.lease(run)
    story.complete(run, 3)
    return {"gamma": job, "gamma_run": run}


def manual_job_deleted(story: Story) -> dict[str, uuid.UUID]:
    """A manual job whose run is cancelled while it runs; then the job is deleted; a
    cron job that missed fires."""
    job = story.schedule("delta", handler="shell.command")
    run = story.trigger(job, "manual-2")
    story.lease(run)
    story.cancel(run)
    Jobs(story.ledger).delete(job, by=actor("alice"))
    missing = story.schedule("epsilon", CronSchedule("* * * * *"))
    story.miss(missing, 3)
    return {"delta": job, "delta_run": run, "epsilon": missing}


def adhoc_runs(story: Story) -> dict[str, uuid.UUID]:
    """Runs that belong to no job: one waits, one completes."""
    waiting = story.adhoc("wait-1", queue="bulk")
    done = story.adhoc("done-1", queue="bulk")
    story.lease(done)
    story.complete(done, 1.25)
    return {"adhoc_waiting": waiting, "adhoc_done": done}


def _step(name: str, *after: str, retries: int = 3) -> StepSpec:
    return StepSpec(name=name, spec=_spec(retries=retries), after=after)


def workflows_run(story: Story) -> dict[str, uuid.UUID]:
    """A diamond whose failed step stops it (the step after both is skipped); one
    cancelled while its first step runs (the second is skipped); one still running."""
    diamond = [
        _step("extract"),
        _step("clean", "extract"),
        _step("enrich", "extract", retries=0),
        _step("publish", "clean", "enrich"),
    ]
    etl = story.start_workflow("etl", diamond)
    story.run_step(etl, "extract", 4.0)
    story.run_step(etl, "clean", 2.0)
    story.run_step(etl, "enrich", None)
    sync = story.start_workflow("sync", [_step("pull"), _step("push", "pull")], OnFailure.CONTINUE)
    story.lease(step_execution_id(sync, "pull"))
    Workflows(story.ledger).cancel(sync, by=actor("erin"), reason="moved")
    story.settle(sync, "pull", StepStatus.CANCELLED)
    report = story.start_workflow("report", [_step("gather"), _step("render", "gather")])
    story.run_step(report, "gather", 1.0)
    return {"etl": etl, "sync": sync, "report": report}


SCENARIOS = (
    cron_job_runs,
    job_lifecycle,
    one_shot_requeued,
    manual_job_deleted,
    adhoc_runs,
    workflows_run,
)


def set_position(database: Database, position: int) -> None:
    with database.transaction() as cursor:
        cursor.execute(
            "UPDATE jobledger_positions SET position = ? WHERE name = ?", (position, POSITION)
        )


def project_randomly(models: ReadModels, database: Database, rng: random.Random) -> None:
    """Step in pages of random sizes; now and then move the position back, so that
    pages are applied again."""
    while True:
        models._reader.page_size = rng.randint(1, 6)
        if rng.random() < 0.2:
            set_position(database, rng.randint(0, models.position()))
        if not models.step():
            return


def dump(database: Database) -> dict[str, list[tuple[Any, ...]]]:
    tables: dict[str, list[tuple[Any, ...]]] = {}
    with database.transaction(snapshot=True) as cursor:
        for table, order in _ORDER.items():
            cursor.execute(f"SELECT * FROM {table} ORDER BY {order}")  # noqa: S608 (constants)
            tables[table] = [tuple(row) for row in cursor.fetchmany(100_000)]
    return tables


def assert_rows_match_aggregates(ledger: Ledger, database: Database) -> None:
    for row in reads(database).list_executions(limit=1000).items:
        execution = ledger.get_execution(row.id)
        assert (row.status, row.version) == (execution.status.value, execution.version)
        assert row.last_error == execution.last_error
        assert row.max_attempts == execution.last_attempt
        assert row.attempt <= row.max_attempts
    for job_row in list_jobs(database, limit=1000).items:
        job = ledger.get_job(job_row.id)
        status = "deleted" if job.deleted else "paused" if job.paused else "active"
        assert (job_row.status, job_row.version) == (status, job.version)
        assert job_row.next_fire_at == job.next_fire_at
    for flow in reads(database).list_workflows(limit=1000).items:
        workflow = ledger.get_workflow(flow.id)
        counts = msgspec.structs.asdict(flow.step_counts)
        assert counts.pop("total") == len(workflow.steps)
        states = Counter(state.value for state in workflow.states.values())
        assert {state: n for state, n in counts.items() if n} == states
        assert (flow.status, flow.version) == (workflow.status.value, workflow.version)
    counted = reads(database).status_counts()
    for kind, table in (("jobs", JOBS), ("executions", EXECUTIONS)):
        with database.transaction(snapshot=True) as cursor:
            cursor.execute(f"SELECT status, count(*) FROM {table} GROUP BY status")  # noqa: S608 (constants)
            actual = dict(cursor.fetchmany(10))
        assert {s: n for s, n in counted[kind].items() if n} == actual


def test_incremental_projection_equals_a_rebuild(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If the log is projected while it grows, in pages of random sizes and with pages
    applied again, then every table equals a rebuild from the whole log, and every row
    agrees with its aggregate."""
    story = Story(ledger, clock)
    models = read_models_on(ledger, database)
    rng = random.Random(7)
    for scenario in SCENARIOS:
        scenario(story)
        project_randomly(models, database, rng)
    assert models.lag() == 0
    incremental = dump(database)
    assert all(incremental.values())
    assert_rows_match_aggregates(ledger, database)
    events = models.rebuild()
    assert events == ledger.recorder.max_notification_id()
    assert dump(database) == incremental
    # In small pages, rows leave the rebuild's memory between pages.
    models._replay_reader.page_size = 3
    models.rebuild()
    assert dump(database) == incremental


def test_attempts_and_closing_are_recorded(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If executions are leased, deferred, expired, requeued, cancelled and discarded,
    then each lease is an attempt row with its outcome, and who closed an execution and
    why is on its row."""
    story = Story(ledger, clock)
    ids = {k: v for scenario in SCENARIOS for k, v in scenario(story).items()}
    read_models_on(ledger, database).rebuild()

    def outcomes(key: str) -> list[tuple[int, str | None]]:
        return [(a.attempt, a.outcome) for a in reads(database).list_attempts(ids[key])]

    assert outcomes("alpha_dead") == [(1, "retried"), (2, "dead_lettered")]
    assert outcomes("beta_run") == [(1, "deferred"), (1, "lease_expired"), (2, "completed")]
    assert outcomes("gamma_run") == [(1, "lease_expired"), (2, "completed")]
    assert outcomes("delta_run") == [(1, "cancelled")]
    assert outcomes("beta_manual") == []
    dead = reads(database).get_execution(ids["alpha_dead"])
    assert dead is not None
    assert (dead.status, dead.closed_by, dead.closed_reason) == (
        "discarded",
        "frank",
        "endpoint gone",
    )
    assert (dead.last_error, dead.attempt, dead.max_attempts) == ("HTTP 502", 2, 2)
    requeued = reads(database).get_execution(ids["gamma_run"])
    assert requeued is not None
    assert (requeued.status, requeued.closed_by, requeued.result) == (
        "completed",
        "dave",
        {"ms": 3},
    )
    assert (requeued.lateness_ms, requeued.duration_ms) == (3000.0, 3.0)
    beta = get_job(database, ids["beta"])
    assert beta is not None
    assert (beta.name, beta.queue, beta.priority, beta.updated_by) == ("beta v2", "hooks", 8, "bob")
    assert beta.schedule == CronIn(cron="0 * * * *", timezone="Europe/Berlin")
    assert (beta.last_execution_id, beta.last_status) == (ids["beta_manual"], "cancelled")
    assert beta.definition is not None
    assert beta.definition.queue == "hooks"
    assert beta.definition.schedule == beta.schedule


def test_a_handlers_decisions_and_an_expiry_show_in_the_rows(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If a handler snoozes its run and then discards it, another fails permanently
    with retries left, and a third run expires unleased, then their attempts read
    snoozed then discarded (both attempt 1), dead_lettered at attempt 1 with the
    permanent error, and the expired run is discarded by the system with the deadline
    as its reason, as the aggregates say."""
    story = Story(ledger, clock)
    dropped, permanent = story.adhoc("dropped"), story.adhoc("permanent", retries=3)
    story.lease(dropped)
    story.snooze(dropped)
    story.lease(dropped)
    story.drop(dropped)
    story.lease(permanent)
    story.fail_permanently(permanent)
    deadline = story.tick() + timedelta(seconds=5)
    spec = ExecutionSpec(handler="test.echo", expires_at=deadline)
    expired = Executions(ledger).run(spec, key="expired", at=story.tick(), by=actor()).id
    story.act(expired, lambda e: e.expire(at=deadline), deadline)
    read_models_on(ledger, database).rebuild()

    def outcomes(run: uuid.UUID) -> list[tuple[int, str | None]]:
        return [(a.attempt, a.outcome) for a in reads(database).list_attempts(run)]

    assert outcomes(dropped) == [(1, "snoozed"), (1, "discarded")]
    assert outcomes(permanent) == [(1, "dead_lettered")]
    rows = {run: reads(database).get_execution(run) for run in (dropped, permanent, expired)}
    assert all(row is not None for row in rows.values())
    assert [(r.status, r.attempt, r.last_error) for r in rows.values() if r] == [
        ("discarded", 1, "moot"),
        ("dead_lettered", 1, PERMANENT_FAILURE + "bad"),
        ("discarded", 1, expiry_reason(deadline)),
    ]
    assert_rows_match_aggregates(ledger, database)


def test_a_backfill_is_late_from_its_request_not_from_its_occurrence(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If a job's occurrences of yesterday are backfilled today and leased 2 s after the
    request, then each backfilled run is 2 s late (from its request), not a day: the
    overview's lateness chart shows how late work starts, not how old an occurrence is."""
    story = Story(ledger, clock)
    job_id = story.schedule("hourly", CronSchedule(expression="0 * * * *"))
    asked = story.tick()
    yesterday = asked - timedelta(days=1)
    Jobs(ledger).backfill(
        job_id,
        start=yesterday,
        end=yesterday + timedelta(hours=2),
        at=asked,
        by=actor("ops"),
    )
    read_models_on(ledger, database).rebuild()
    runs = [row.id for row in reads(database).list_executions(job_id=job_id, limit=10).items]
    assert len(runs) == 2
    for run in runs:
        story.lease(run, at=asked + timedelta(seconds=2))
    read_models_on(ledger, database).rebuild()
    rows = [reads(database).get_execution(run) for run in runs]
    assert [(r.trigger, r.lateness_ms) for r in rows if r] == [("backfill", 2000.0)] * 2


def test_each_jobs_latest_runs_come_latest_first(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If two jobs ran three times and once and a third never, then their latest runs
    come latest first, at most as many as asked for each, and the idle job has none."""
    story = Story(ledger, clock)
    busy, once, idle = (story.schedule(name) for name in ("busy", "once", "idle"))
    runs = [story.trigger(busy, key) for key in ("k1", "k2", "k3")]
    single = story.trigger(once, "k1")
    read_models_on(ledger, database).rebuild()
    latest = reads(database).recent_runs([busy, once, idle], per_job=2)
    assert {job: [c.id for c in cells] for job, cells in latest.items()} == {
        busy: runs[:0:-1],
        once: [single],
    }
    assert {c.status for cells in latest.values() for c in cells} == {"pending"}


def test_a_requeued_dead_letter_gets_a_fresh_budget_in_the_read_model(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If a dead letter with two attempts per budget is requeued, fails twice more and is
    requeued again, then its row reads attempt 3 of 4, then 4 of 4, then 5 of 6 (never
    "4 of 2"), like the aggregate, and a rebuild gives the same rows."""
    story = Story(ledger, clock)
    models = read_models_on(ledger, database)
    run = story.adhoc("requeued-twice", retries=1)

    def attempt_of() -> tuple[int, int]:
        while models.step():
            pass
        row = reads(database).get_execution(run)
        assert row is not None
        return row.attempt, row.max_attempts

    seen = []
    for step in ("fail", "fail", "requeue", "fail", "fail", "requeue"):
        if step == "fail":
            story.lease(run)
            story.fail(run, "HTTP 500")
        else:
            story.requeue(run)
        seen.append(attempt_of())
    assert seen == [(2, 2), (2, 2), (3, 4), (4, 4), (4, 4), (5, 6)]
    assert_rows_match_aggregates(ledger, database)
    incremental = dump(database)
    models.rebuild()
    assert dump(database) == incremental


def test_two_followers_at_once_apply_each_event_once(
    store_settings: Settings, ledger: Ledger, clock: Clock
) -> None:
    """If two followers with their own connections step at the same time, then the
    tables (counters included) equal a rebuild: no page was applied twice."""
    story = Story(ledger, clock)
    for scenario in SCENARIOS:
        scenario(story)
    databases = [projection_database(store_settings) for _ in range(2)]
    try:
        followers = [read_models_on(ledger, db, page_size=3) for db in databases]
        threads = [threading.Thread(target=functools.partial(_drain, m)) for m in followers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        together = dump(databases[0])
        followers[0].rebuild()
        assert dump(databases[0]) == together
    finally:
        for db in databases:
            db.close()


def test_only_a_page_commits_without_waiting_for_the_disk(
    store_settings: Settings, database: Database
) -> None:
    """If a transaction asks for an asynchronous commit, then on PostgreSQL it has
    synchronous_commit off, and the next transaction of the same pool has the server's
    setting again; on SQLite the transaction commits as before."""
    setting = None
    if store_settings.uses_postgres:
        with database.transaction() as cursor:
            cursor.execute("SHOW synchronous_commit")
            setting = cursor.fetchone()
    with database.transaction() as cursor:
        cursor.asynchronous_commit()
        if store_settings.uses_postgres:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == ("off",)
        cursor.execute("INSERT INTO jobledger_positions (name, position) VALUES ('probe', 7)")
    with database.transaction() as cursor:
        if store_settings.uses_postgres:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == setting
        cursor.execute("SELECT position FROM jobledger_positions WHERE name = 'probe'")
        assert cursor.fetchone() == (7,)


def test_a_page_with_several_records_of_one_queue_keeps_the_newest(database: Database) -> None:
    """If one checkpoint page pauses, pauses again and resumes a queue, then it commits
    (one statement upserts each queue once) and the newest record stands."""
    checkpoint = SqlCheckpoint(database)
    records = [
        QueuePause(queue="held", version=1, paused=True, by="ada", reason="x", since=T0),
        QueuePause(queue="held", version=3, paused=False),
        QueuePause(queue="held", version=2, paused=True, by="ada", reason="y", since=T0),
        QueuePause(queue="other", version=1, paused=True, by="bob", reason="z", since=T0),
    ]
    checkpoint.commit([], 4, pauses=records)
    assert checkpoint.position() == 4
    assert sorted(checkpoint.pauses(), key=lambda p: p.queue) == [records[1], records[3]]


def _drain(models: ReadModels) -> None:
    while models.step():
        pass


def test_rebuild_reports_progress_to_the_head(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If the read models are rebuilt, then progress ends at (head, head) and the lag
    is zero."""
    story = Story(ledger, clock)
    adhoc_runs(story)
    calls: list[tuple[int, int]] = []
    models = read_models_on(ledger, database)
    assert models.lag() == ledger.recorder.max_notification_id()
    models.rebuild(progress=lambda done, total: calls.append((done, total)))
    head = ledger.recorder.max_notification_id()
    assert calls[-1] == (head, head)
    assert models.position() == head
    assert models.lag() == 0


def test_each_workflow_has_a_row_with_its_steps_counted_and_who_started_it(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If one workflow fails, one is cancelled and one still runs, then the list shows
    each, the latest started first, with its status, its steps counted by state, when
    it ended (nothing while it runs) and who started it; a status or a name narrows
    the list, and a rebuild gives the same rows."""
    story = Story(ledger, clock)
    ids = workflows_run(story)
    models = read_models_on(ledger, database)
    project_randomly(models, database, random.Random(3))
    listed = reads(database).list_workflows()
    assert [row.id for row in listed.items] == [ids["report"], ids["sync"], ids["etl"]]
    rows = {row.name: row for row in listed.items}

    def counts(name: str) -> dict[str, int]:
        shown = msgspec.structs.asdict(rows[name].step_counts)
        return {state: n for state, n in shown.items() if n}

    assert counts("etl") == {"total": 4, "completed": 2, "failed": 1, "skipped": 1}
    assert counts("sync") == {"total": 2, "cancelled": 1, "skipped": 1}
    assert counts("report") == {"total": 2, "completed": 1, "released": 1}
    assert [rows[n].status for n in ("etl", "sync", "report")] == ["failed", "cancelled", "running"]
    assert rows["report"].ended_at is None
    etl, sync = rows["etl"], rows["sync"]
    assert etl.started_at is not None
    assert etl.ended_at is not None
    assert etl.started_at < etl.ended_at == etl.updated_at
    # The cancel ended it; the run it cancelled was recorded after.
    assert sync.ended_at is not None
    assert sync.updated_at is not None
    assert sync.ended_at < sync.updated_at
    assert {(row.started_by, row.started_via) for row in listed.items} == {("grace", "system")}
    assert [row.name for row in reads(database).list_workflows(status="running").items] == [
        "report"
    ]
    assert reads(database).list_workflows(name="sync").total == 1
    assert_rows_match_aggregates(ledger, database)
    before = dump(database)
    models.rebuild()
    assert dump(database) == before


# ---- random histories ---------------------------------------------------------------

# Leases come up more often, so that histories get past their first attempt.
_ACTIONS: tuple[str, ...] = (
    "lease",
    "lease",
    "lease",
    "complete",
    "fail",
    "fail",
    "expire",
    "defer",
    "requeue",
)
_ACTIONS += ("cancel", "discard", "snooze", "fail_permanently", "drop")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_history_projects_like_its_rebuild(
    ledger: Ledger, database: Database, clock: Clock, data: st.DataObject
) -> None:
    """If any sequence of execution commands is recorded and projected in random pages
    (some applied twice), then the tables equal a rebuild and agree with the log."""
    story = Story(ledger, clock)
    count = data.draw(st.integers(1, 3), label="executions")
    retries = data.draw(st.integers(0, 2), label="retries")
    ids = [story.adhoc(uuid.uuid4().hex, retries=retries) for _ in range(count)]
    for index, action in data.draw(
        st.lists(st.tuples(st.integers(0, count - 1), st.sampled_from(_ACTIONS)), max_size=30),
        label="commands",
    ):
        _attempt(story, ids[index], action)
    models = read_models_on(ledger, database)
    project_randomly(models, database, random.Random(data.draw(st.integers(0, 2**32))))
    incremental = dump(database)
    assert_rows_match_aggregates(ledger, database)
    # Pages of the rebuild as small as a page of the follower: rows leave its memory at
    # every page they can.
    models._replay_reader.page_size = data.draw(st.integers(1, 8), label="rebuild page")
    models.rebuild()
    assert dump(database) == incremental


def _attempt(story: Story, execution_id: uuid.UUID, action: str) -> None:
    """Run the command if the execution allows it (a refused command emits nothing)."""
    commands: dict[str, Callable[[uuid.UUID], None]] = {
        "lease": story.lease,
        "complete": lambda i: story.complete(i, 5),
        "fail": lambda i: story.fail(i, "boom"),
        "expire": story.expire,
        "defer": story.defer,
        "requeue": story.requeue,
        "cancel": story.cancel,
        "discard": story.discard,
        "snooze": story.snooze,
        "fail_permanently": story.fail_permanently,
        "drop": story.drop,
    }
    with contextlib.suppress(DomainError):
        commands[action](execution_id)


# ---- queries on known data ------------------------------------------------------------


def known_data(story: Story) -> dict[str, uuid.UUID]:
    """Four jobs and eight executions, at known times (see each query test)."""
    ids = {
        "alpha": story.schedule("alpha", CronSchedule("*/5 * * * *"), retries=0),
        "beta": story.schedule("beta", handler="http.webhook", queue="hooks"),
        "gamma": story.schedule("Gamma backup", queue="hooks"),
        "delta": story.schedule("delta", handler="shell.command"),
    }
    Jobs(story.ledger).pause(ids["beta"], by=actor("bob"))
    Jobs(story.ledger).delete(ids["gamma"], by=actor("bob"))
    ids |= _first_minute(story, ids["alpha"])
    ids |= _second_minute(story, ids["delta"])
    return ids


def _first_minute(story: Story, alpha: uuid.UUID) -> dict[str, uuid.UUID]:
    """12:00: four runs complete; lateness 100..400 ms, durations 10..40 ms."""
    ids = {"alpha_run": story.fire(alpha, late=timedelta(0))}
    for n in (2, 3, 4):
        ids[f"e{n}"] = story.adhoc(f"e{n}", at=T0 + timedelta(seconds=n))
    for n, key in enumerate(["alpha_run", "e2", "e3", "e4"], start=1):
        enqueued = T0 + timedelta(seconds=0 if n == 1 else n)
        started = enqueued + timedelta(milliseconds=100 * n)
        story.lease(ids[key], at=started)
        story.complete(ids[key], 10 * n, at=started + timedelta(milliseconds=10 * n))
    return ids


def _second_minute(story: Story, delta: uuid.UUID) -> dict[str, uuid.UUID]:
    """12:01: two dead letters (one after a retry), one pending manual run, one running."""
    minute = T0 + timedelta(minutes=1)
    e5 = story.adhoc("e5", at=minute, handler="http.webhook", queue="hooks", retries=1)
    story.lease(e5, at=minute)
    story.fail(e5, "HTTP 503 Service Unavailable", at=minute + timedelta(seconds=1))
    story.lease(e5, at=minute + timedelta(seconds=10))
    story.fail(e5, "HTTP 503 again", at=minute + timedelta(seconds=11))
    e6 = story.adhoc("e6", at=minute + timedelta(seconds=20), handler="test.fail", retries=0)
    story.lease(e6, at=minute + timedelta(seconds=20, milliseconds=500))
    story.fail(e6, "boom", at=minute + timedelta(seconds=21))
    story.tick(minute + timedelta(seconds=29))
    e7 = story.trigger(delta, "e7")
    e8 = story.adhoc("e8", at=minute + timedelta(seconds=40), handler="http.webhook", queue="hooks")
    story.lease(e8, at=minute + timedelta(seconds=40, milliseconds=250))
    return {"e5": e5, "e6": e6, "e7": e7, "e8": e8}


@pytest.fixture
def known(ledger: Ledger, database: Database, clock: Clock) -> dict[str, uuid.UUID]:
    clock.at(T0 - timedelta(minutes=2))
    ids = known_data(Story(ledger, clock))
    project_randomly(
        read_models_on(ledger, database),
        database,
        random.Random(1),
    )
    return ids


def _names(page: Page) -> list[str]:
    return [item.name for item in page.items]


def test_jobs_filter_search_and_page(database: Database, known: dict[str, uuid.UUID]) -> None:
    """If jobs are listed with filters, a search or a page, then they come by name
    (ignoring case), with the total that matched."""
    everything = list_jobs(database)
    assert (_names(everything), everything.total) == (["alpha", "beta", "delta", "Gamma backup"], 4)
    assert _names(list_jobs(database, status="active")) == ["alpha", "delta"]
    assert _names(list_jobs(database, handler="http.webhook")) == ["beta"]
    assert _names(list_jobs(database, queue="hooks")) == ["beta", "Gamma backup"]
    assert _names(list_jobs(database, search="GAM")) == ["Gamma backup"]
    assert _names(list_jobs(database, search="a_p")) == []  # _ is no wildcard
    page = list_jobs(database, limit=2, offset=1)
    assert (_names(page), page.total, page.limit, page.offset) == (["beta", "delta"], 4, 2, 1)
    alpha = get_job(database, known["alpha"])
    assert alpha is not None
    assert (alpha.last_execution_id, alpha.last_status) == (known["alpha_run"], "completed")
    assert alpha.last_fired_at == T0
    assert alpha.next_fire_at == T0 + timedelta(minutes=5)
    assert alpha.created_at is not None
    assert alpha.created_at.tzinfo is UTC
    assert get_job(database, uuid.uuid4()) is None


def test_a_definition_the_list_cannot_read_leaves_the_others_shown(
    database: Database, known: dict[str, uuid.UUID]
) -> None:
    """If one job's stored definition cannot be read (a kind of schedule this release
    does not know), then the list still answers every job: that one without its
    definition and schedule, the others in the shape the API takes."""
    with database.transaction() as cursor:
        cursor.execute(
            f"UPDATE {JOBS} SET definition = ? WHERE id = ?",  # noqa: S608 (a constant name)
            ('{"name": "alpha", "schedule": {"type": "lunar"}}', str(known["alpha"])),
        )
    rows = {row.name: row for row in list_jobs(database).items}
    assert (rows["alpha"].definition, rows["alpha"].schedule) == (None, None)
    beta = rows["beta"].definition
    assert beta is not None
    assert (beta.name, beta.schedule) == ("beta", rows["beta"].schedule)


def test_executions_newest_first_with_filters(
    database: Database, known: dict[str, uuid.UUID]
) -> None:
    """If executions are listed, then the newest come first, and every filter and page
    narrows them with the right total."""

    def ids(page: Page) -> list[uuid.UUID]:
        return [item.id for item in page.items]

    newest = ["e8", "e7", "e6", "e5", "e4", "e3", "e2", "alpha_run"]
    everything = reads(database).list_executions()
    assert (ids(everything), everything.total) == ([known[k] for k in newest], 8)
    assert reads(database).list_executions(status="completed").total == 4
    assert ids(reads(database).list_executions(queue="hooks")) == [known["e8"], known["e5"]]
    assert ids(reads(database).list_executions(handler="shell.command")) == [known["e7"]]
    assert ids(reads(database).list_executions(job_id=known["alpha"])) == [known["alpha_run"]]
    window = reads(database).list_executions(
        since=T0 + timedelta(minutes=1), until=T0 + timedelta(seconds=89)
    )
    assert ids(window) == [known["e6"], known["e5"]]
    page = reads(database).list_executions(limit=3, offset=2)
    assert (ids(page), page.total) == ([known[k] for k in ("e6", "e5", "e4")], 8)
    alpha_run = reads(database).get_execution(known["alpha_run"])
    assert alpha_run is not None
    assert (alpha_run.job_name, alpha_run.trigger, alpha_run.lateness_ms) == (
        "alpha",
        "schedule",
        100.0,
    )
    running = reads(database).get_execution(known["e8"])
    assert running is not None
    assert (running.status, running.worker_id, running.job_name) == ("running", "w1", None)
    assert reads(database).get_execution(uuid.uuid4()) is None


def test_dead_letters_and_their_attempts(database: Database, known: dict[str, uuid.UUID]) -> None:
    """If dead letters are listed, then the latest to die come first, the filters
    (error text matched case and all) narrow them, and each attempt is listed."""

    def ids(**filters: Any) -> list[uuid.UUID]:
        return [item.id for item in reads(database).list_dead_letters(**filters).items]

    assert ids() == [known["e6"], known["e5"]]
    assert ids(queue="hooks") == [known["e5"]]
    assert ids(handler="test.fail") == [known["e6"]]
    assert ids(error_contains="503") == [known["e5"]]
    assert ids(error_contains="boom") == [known["e6"]]
    assert ids(error_contains="BOOM") == []
    assert ids(job_id=known["alpha"]) == []
    assert reads(database).list_dead_letters(limit=1).total == 2
    attempts = reads(database).list_attempts(known["e5"])
    assert [(a.attempt, a.outcome, a.error) for a in attempts] == [
        (1, "retried", "HTTP 503 Service Unavailable"),
        (2, "dead_lettered", "HTTP 503 again"),
    ]
    first = attempts[0]
    assert (first.worker_id, first.duration_ms) == ("w1", 1000.0)
    assert first.started_at == T0 + timedelta(minutes=1)
    assert first.finished_at == T0 + timedelta(minutes=1, seconds=1)


def _follow(
    listing: Callable[..., Page], database: Database, limit: int, **filters: Any
) -> list[uuid.UUID]:
    """Every id of a list, page by page along its cursors."""
    ids: list[uuid.UUID] = []
    cursor = None
    while True:
        page = listing(database, limit=limit, cursor=cursor, **filters)
        ids.extend(item.id for item in page.items)
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_cursors_walk_every_list_in_its_order(
    database: Database, known: dict[str, uuid.UUID], limit: int
) -> None:
    """If a list is followed along its cursors, then the pages hold every row once, in
    the order of the whole list, filters and all, and the last page has no cursor."""
    del known
    lists: list[tuple[Callable[..., Page], dict[str, Any]]] = [
        (list_jobs, {}),
        (list_jobs, {"queue": "hooks"}),
        (lambda db, **f: reads(db).list_executions(**f), {}),
        (lambda db, **f: reads(db).list_executions(**f), {"status": "completed"}),
        (lambda db, **f: reads(db).list_dead_letters(**f), {}),
    ]
    for listing, filters in lists:
        whole = [item.id for item in listing(database, **filters).items]
        assert len(whole) > 1
        assert _follow(listing, database, limit, **filters) == whole
        assert listing(database, limit=len(whole), **filters).next_cursor is None


def test_a_cursor_page_skips_and_repeats_nothing_when_rows_come_and_go(
    database: Database, known: dict[str, uuid.UUID], ledger: Ledger, clock: Clock
) -> None:
    """If jobs are created between two pages, then the page after a cursor starts right
    after its last row: no row repeats (as it would with an offset) and none is skipped."""
    del known
    first = list_jobs(database, limit=2)
    assert _names(first) == ["alpha", "beta"]
    assert first.next_cursor is not None
    jobs = Jobs(ledger)
    for name in ("aardvark", "azure"):  # both sort before the cursor's row
        definition = JobDefinition(name=name, spec=ExecutionSpec(handler="test.echo"))
        jobs.schedule(definition, at=clock.now, by=actor())
    models = read_models_on(ledger, database)
    while models.step():
        pass
    after = list_jobs(database, limit=10, cursor=first.next_cursor)
    assert _names(after) == ["delta", "Gamma backup"]
    assert after.total == 6


def test_a_cursor_from_elsewhere_is_refused(
    database: Database, known: dict[str, uuid.UUID]
) -> None:
    """If a list is asked for with a cursor it never handed out (garbled, or another
    list's), then it is refused as such."""
    del known
    for garbled in ("not-a-cursor", "e30", "WyJqb2JzIl0"):  # the last: ["jobs"], no key
        with pytest.raises(CursorError):
            list_jobs(database, cursor=garbled)
    executions = reads(database).list_executions(limit=1)
    assert executions.next_cursor is not None
    with pytest.raises(CursorError, match="another list"):
        list_jobs(database, cursor=executions.next_cursor)
    with pytest.raises(CursorError, match="another list"):
        reads(database).list_dead_letters(cursor=executions.next_cursor)


def test_minute_stats_count_and_rank(database: Database, known: dict[str, uuid.UUID]) -> None:
    """If minutes are asked for, then each has its counts and its lateness and duration
    percentiles (within 2 %), and a quiet minute has zeros."""
    del known
    stats = reads(database).minute_stats(
        since=T0 + timedelta(seconds=30), until=T0 + timedelta(minutes=3)
    )
    assert [s.minute for s in stats] == [T0 + timedelta(minutes=m) for m in range(3)]
    first, second, quiet = stats
    assert (first.fired, first.completed, first.failed, first.dead_lettered) == (4, 4, 0, 0)
    lateness = (first.lateness_p50_ms, first.lateness_p95_ms, first.lateness_p99_ms)
    assert lateness == pytest.approx((200, 400, 400), rel=0.02)
    duration = (first.duration_p50_ms, first.duration_p95_ms, first.duration_p99_ms)
    assert duration == pytest.approx((20, 40, 40), rel=0.02)
    assert (second.fired, second.completed, second.failed, second.dead_lettered) == (4, 0, 3, 2)
    lateness = (second.lateness_p50_ms, second.lateness_p95_ms, second.lateness_p99_ms)
    assert lateness == pytest.approx((250, 500, 500), rel=0.02)
    assert second.duration_p50_ms is None
    assert (quiet.fired, quiet.completed, quiet.lateness_p99_ms) == (0, 0, None)
    assert reads(database).minute_stats(since=T0, until=T0) == []
    with pytest.raises(ValueError, match="7 days"):
        reads(database).minute_stats(since=T0, until=T0 + timedelta(days=8))


def test_status_counts_list_every_status(database: Database, known: dict[str, uuid.UUID]) -> None:
    """If the counts are asked for, then every status of jobs and executions is there."""
    del known
    assert reads(database).status_counts() == {
        "jobs": {"active": 2, "paused": 1, "deleted": 1},
        "executions": {
            "pending": 1,
            "running": 1,
            "completed": 4,
            "dead_lettered": 2,
            "cancelled": 0,
            "discarded": 0,
            "skipped": 0,
        },
    }


# ---- the command ----------------------------------------------------------------------


def test_projections_rebuild_command_on_the_embedded_store(tmp_path: Path) -> None:
    """If `jobledger projections rebuild` runs on the embedded store, then it replays
    every event into the read models and says how many."""
    settings = load_settings({}, test_handlers="true", data_dir=str(tmp_path))
    migrate(settings, progress=lambda _: None)
    ledger = open_ledger(settings)
    try:
        for n in range(3):
            Executions(ledger).run(_spec(), key=f"run-{n}", at=datetime.now(UTC), by=actor())
        events = ledger.recorder.max_notification_id()
    finally:
        ledger.close()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    result = subprocess.run(  # noqa: S603 (our own entry point, fixed arguments)
        [
            sys.executable,
            "-m",
            "jobledger.cli",
            "--data-dir",
            str(tmp_path),
            "projections",
            "rebuild",
        ],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"read models rebuilt: {events} events replayed in" in result.stdout
    database = projection_database(settings)
    try:
        page = reads(database).list_executions()
        assert page.total == 3
        assert {item.trigger for item in page.items} == {Trigger.ADHOC.value}
    finally:
        database.close()


def _failed(error: str) -> Execution:
    """An execution that failed once with ``error`` and will not retry (not saved)."""
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.fail", retry=RetryPolicy(max_retries=0)),
        ready_at=datetime.now(tz=UTC),
        trigger=Trigger.ADHOC,
    )
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=datetime.now(tz=UTC))
    execution.fail(lease_id=lease_id, error=error, at=datetime.now(tz=UTC))
    return execution


def _failed_with_nul(ledger: Ledger) -> uuid.UUID:
    """An execution whose error and discard reason hold NUL characters."""
    execution = _failed("bad\x00byte")
    # The domain refuses such a reason now; events saved before it did are still read.
    execution._discarded(by="op\x00", reason="why\x00", via=None, lease_id=None)
    ledger.save_all(execution)
    return execution.id


def test_a_nul_character_in_an_error_does_not_stop_the_projection(
    ledger: Ledger, database: Database
) -> None:
    """If a handler's error text or an operator's reason holds a NUL character, then the
    execution is still projected, with the character replaced."""
    execution_id = _failed_with_nul(ledger)
    _drain(read_models_on(ledger, database))
    row = reads(database).get_execution(execution_id)
    assert row is not None
    assert (row.last_error, row.closed_by, row.closed_reason) == (
        "bad\ufffdbyte",
        "op\ufffd",
        "why\ufffd",
    )


def test_an_escaped_nul_in_an_error_is_kept_as_written(ledger: Ledger, database: Database) -> None:
    """If a handler's error text holds a backslash followed by ``u0000`` (text, not a
    NUL character), then the projection keeps it exactly as written."""
    execution = _failed("escaped \\u0000 here")
    ledger.save_all(execution)
    _drain(read_models_on(ledger, database))
    row = reads(database).get_execution(execution.id)
    assert row is not None
    assert row.last_error == "escaped \\u0000 here"


# ---- the rebuild into new tables --------------------------------------------------------


def _tables_and_indexes(store_settings: Settings, database: Database) -> list[tuple[Any, ...]]:
    """Every table and index of the store (name, table, definition), sorted."""
    with database.transaction(snapshot=True) as cursor:
        if store_settings.uses_postgres:
            cursor.execute(
                "SELECT tablename, '', '' FROM pg_tables WHERE schemaname = current_schema() "
                "UNION ALL SELECT indexname, tablename, indexdef FROM pg_indexes "
                "WHERE schemaname = current_schema()"
            )
        else:
            cursor.execute(
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type IN ('table', 'index')"
            )
        return sorted(tuple(row) for row in cursor.fetchmany(10_000))


def _followed(
    ledger: Ledger, database: Database, clock: Clock
) -> tuple[ReadModels, dict[str, list[tuple[Any, ...]]]]:
    """Every scenario in the log, followed into the tables: the follower and a dump."""
    story = Story(ledger, clock)
    for scenario in SCENARIOS:
        scenario(story)
    models = read_models_on(ledger, database)
    _drain(models)
    return models, dump(database)


def _positions(database: Database) -> dict[str, int]:
    with database.transaction(snapshot=True) as cursor:
        cursor.execute("SELECT name, position FROM jobledger_positions")
        return {str(name): int(position) for name, position in cursor.fetchmany(100)}


def test_a_rebuild_swaps_in_tables_like_the_old_ones(
    store_settings: Settings, ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If the read models are rebuilt, then the new tables replace the old ones under
    the same names, with the same indexes and keys, no table of the rebuild is left,
    its mark is gone from the positions, and the position is the log's head."""
    models, _live = _followed(ledger, database, clock)
    before = _tables_and_indexes(store_settings, database)
    with structlog.testing.capture_logs() as logs:
        models.rebuild()
    assert _tables_and_indexes(store_settings, database) == before
    assert not [e for e in logs if e["event"] == "read_models.rebuild_in_place"]
    assert _positions(database)[POSITION] == ledger.recorder.max_notification_id()
    assert MARK not in _positions(database)


def test_until_the_swap_the_live_tables_serve_and_hold_the_archive_back(
    ledger: Ledger, database: Database, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a rebuild has folded the log but not swapped its tables in yet, then the live
    tables still hold every row the follower wrote, and the rebuild's mark holds the
    archive's low-water mark at 0."""
    models, live = _followed(ledger, database, clock)
    seen: list[tuple[dict[str, list[tuple[Any, ...]]], dict[str, int]]] = []
    swap = ShadowRebuild._swap

    def looking(self: ShadowRebuild, reached: int) -> None:
        seen.append((dump(database), _positions(database)))
        swap(self, reached)

    monkeypatch.setattr(ShadowRebuild, "_swap", looking)
    models.rebuild()
    ((during, positions),) = seen
    assert during == live
    assert positions[MARK] == 0
    assert dump(database) == live


def test_a_rebuild_that_fails_falls_back_to_a_replay_in_place(
    store_settings: Settings,
    ledger: Ledger,
    database: Database,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the rebuild into new tables fails half-way, then it says so, leaves no table
    or mark of its own behind, and the tables are replayed in place instead: they equal
    what the follower built."""
    models, live = _followed(ledger, database, clock)
    before = _tables_and_indexes(store_settings, database)

    def failing(_self: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(read_model_replay.Replay, "finish", failing)
    with structlog.testing.capture_logs() as logs:
        models.rebuild()
    assert [e["error"] for e in logs if e["event"] == "read_models.rebuild_in_place"] == [
        "RuntimeError: disk full"
    ]
    assert dump(database) == live
    assert _tables_and_indexes(store_settings, database) == before
    assert MARK not in _positions(database)


def test_an_event_after_a_final_status_is_folded_as_the_follower_folds_it(
    ledger: Ledger, database: Database, clock: Clock
) -> None:
    """If the log holds an event of an execution after its completion (which no command
    emits, but an older release or a repair may have), then the rebuild folds it into
    that execution's row, late, and the tables equal the follower's."""
    story = Story(ledger, clock)
    adhoc_runs(story)
    done = story.adhoc("done-then-discarded")
    story.lease(done)
    story.complete(done, 2.0)
    for index in range(3):  # later events of other runs, so the late one is far behind
        story.adhoc(f"after-{index}")
    execution = ledger.get_execution(done)
    execution._discarded(by="repair", reason="after the fact", via=None, lease_id=None)
    ledger.save_all(execution)
    models = read_models_on(ledger, database)
    _drain(models)
    live = dump(database)
    models._replay_reader.page_size = 2  # the completion and the discard in other pages
    with structlog.testing.capture_logs() as logs:
        models.rebuild()
    assert [e["events"] for e in logs if e["event"] == "read_models.rebuild_late_events"] == [1]
    assert dump(database) == live
    row = reads(database).get_execution(done)
    assert row is not None
    assert (row.status, row.closed_by) == ("discarded", "repair")


def test_a_follower_stepping_through_a_rebuild_ends_with_the_same_tables(
    store_settings: Settings, ledger: Ledger, clock: Clock
) -> None:
    """If a follower on another connection keeps stepping while the read models are
    rebuilt and new events arrive, then once both are done the tables equal a fold of
    the whole log and agree with the aggregates."""
    story = Story(ledger, clock)
    for scenario in SCENARIOS:
        scenario(story)
    databases = [projection_database(store_settings) for _ in range(2)]
    stop = threading.Event()
    try:
        follower = read_models_on(
            ledger,
            databases[0],
            page_size=2,
        )
        rebuilder = read_models_on(ledger, databases[1])

        def follow() -> None:
            while not stop.is_set():
                follower.step()

        thread = threading.Thread(target=follow)
        thread.start()
        for index in range(5):
            story.adhoc(f"during-{index}")
            rebuilder.rebuild()
        stop.set()
        thread.join(60)
        _drain(follower)
        together = dump(databases[0])
        assert_rows_match_aggregates(ledger, databases[0])
        rebuilder.rebuild()
        assert dump(databases[0]) == together
    finally:
        stop.set()
        for db in databases:
            db.close()


def test_the_rebuilt_tables_keep_the_grants_of_the_old_ones(
    postgres_url: str, clock: Clock
) -> None:
    """If another role may read a read-model table (PostgreSQL: SQLite has no roles),
    then after a rebuild it still may, and the table has the same owner."""
    settings = load_settings({}, database_url=postgres_url)
    ledger, database = open_ledger(settings), projection_database(settings)
    role = f"jl_reader_{uuid.uuid4().hex[:8]}"
    owner = "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = ?"
    with database.transaction() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT SELECT ON {EXECUTIONS} TO {role}")
        cursor.execute(owner, (EXECUTIONS,))
        owned_by = cursor.fetchone()
    try:
        adhoc_runs(Story(ledger, clock))
        read_models_on(ledger, database).rebuild()
        with database.transaction(snapshot=True) as cursor:
            cursor.execute("SELECT has_table_privilege(?, ?, 'SELECT')", (role, EXECUTIONS))
            assert cursor.fetchone() == (True,)
            cursor.execute("SELECT has_table_privilege(?, ?, 'SELECT')", (role, JOBS))
            assert cursor.fetchone() == (False,)
            cursor.execute(owner, (EXECUTIONS,))
            assert cursor.fetchone() == owned_by
    finally:
        with database.transaction() as cursor:
            cursor.execute(f"REVOKE ALL ON {EXECUTIONS} FROM {role}")
            cursor.execute(f"DROP ROLE {role}")
        database.close()
        ledger.close()


# ---- a rebuild in shares, a process each ---------------------------------------------


def _in_parts(settings: Settings) -> ProcessParts:
    """Two shares whatever the log's length, in pages of three (rows leave memory)."""
    return ProcessParts(settings, 2, page_size=3, min_events=0)


def _fires_in_both_shares(story: Story) -> list[uuid.UUID]:
    """A job's runs until they fall in both shares and the latest in another share
    than the one before it: the merge must pick the job's latest run across shares."""
    job = story.schedule("spread", CronSchedule("* * * * *"))
    runs = [story.fire(job)]
    while len(runs) < 2 or part_of(runs[-1], 2) == part_of(runs[-2], 2):
        runs.append(story.fire(job))
    story.lease(runs[-2])
    story.complete(runs[-2], 3.0)
    story.lease(runs[-1])
    return runs


@contextlib.contextmanager
def _postgres_store(url: str) -> Iterator[tuple[Settings, Ledger, Database]]:
    settings = load_settings({}, database_url=url)
    ledger, database = open_ledger(settings), projection_database(settings)
    try:
        yield settings, ledger, database
    finally:
        database.close()
        ledger.close()


def test_a_rebuild_in_two_processes_equals_the_follower(postgres_url: str, clock: Clock) -> None:
    """If the executions' events are folded in two processes, a share of the streams
    each, and the jobs' here, then every table equals what the follower built (a job
    names its latest run, whichever share holds it), the indexes and keys, built on two
    connections, are those of the old tables, progress ends at the head and the
    position is there."""
    with _postgres_store(postgres_url) as (settings, ledger, database):
        runs = _fires_in_both_shares(Story(ledger, clock))
        _models, live = _followed(ledger, database, clock)
        before = _tables_and_indexes(settings, database)
        parted = read_models_on(
            ledger,
            database,
            parts=_in_parts(settings),
        )
        calls: list[tuple[int, int]] = []
        with structlog.testing.capture_logs() as logs:
            events = parted.rebuild(progress=lambda done, total: calls.append((done, total)))
        head = ledger.recorder.max_notification_id()
        assert [e["parts"] for e in logs if e["event"] == "read_models.rebuild_in_parts"] == [2]
        indexing = [e for e in logs if e["event"] == "read_models.rebuild_indexing"]
        assert [e["connections"] for e in indexing] == [2]
        assert _tables_and_indexes(settings, database) == before
        assert not [e for e in logs if e["event"] == "read_models.rebuild_in_place"]
        assert events == head
        assert dump(database) == live
        spread = list_jobs(database, limit=100).items
        assert {job.name: job.last_execution_id for job in spread}["spread"] == runs[-1]
        assert calls[-1] == (head, head)
        assert _positions(database)[POSITION] == head
        assert MARK not in _positions(database)


def test_a_nul_character_in_the_log_is_rebuilt_as_the_follower_stores_it(
    postgres_url: str, clock: Clock
) -> None:
    """If events of the log hold NUL characters, then a rebuild into new tables, in one
    process or in two, stores them replaced as the follower does, without falling back
    to a replay in place: the tables equal the follower's."""
    with _postgres_store(postgres_url) as (settings, ledger, database):
        _failed_with_nul(ledger)
        _models, live = _followed(ledger, database, clock)
        for parts in (None, _in_parts(settings)):
            models = read_models_on(
                ledger,
                database,
                parts=parts,
            )
            models._replay_reader.page_size = 2  # the NUL comes after rows went out
            with structlog.testing.capture_logs() as logs:
                models.rebuild()
            assert not [e for e in logs if e["event"] == "read_models.rebuild_in_place"]
            assert dump(database) == live


def _fallen_back(postgres_url: str, clock: Clock, parts: Callable[[Settings], ProcessParts]) -> str:
    """Rebuild with ``parts`` (made from the store's settings), which must fail: the
    tables must equal the follower's, with no table or mark of the rebuild left. The
    reason the rebuild logged for replaying in place."""
    with _postgres_store(postgres_url) as (settings, ledger, database):
        _models, live = _followed(ledger, database, clock)
        before = _tables_and_indexes(settings, database)
        with structlog.testing.capture_logs() as logs:
            read_models_on(
                ledger,
                database,
                parts=parts(settings),
            ).rebuild()
        [error] = [e["error"] for e in logs if e["event"] == "read_models.rebuild_in_place"]
        assert dump(database) == live
        assert _tables_and_indexes(settings, database) == before
        assert MARK not in _positions(database)
        return str(error)


def test_a_share_that_fails_fails_the_rebuild_in_new_tables(
    postgres_url: str, clock: Clock, tmp_path: Path
) -> None:
    """If a share's process cannot do its part (here: its store is not PostgreSQL),
    then the rebuild says which share failed and why, leaves no table of its own, and
    replays in place instead: the tables equal what the follower built."""
    elsewhere = load_settings({}, database_url=f"sqlite:///{tmp_path / 'other.db'}")
    migrate(elsewhere, progress=lambda _line: None)
    error = _fallen_back(
        postgres_url, clock, lambda _settings: ProcessParts(elsewhere, 2, page_size=3, min_events=0)
    )
    assert error.startswith("RebuildPartError: share "), error
    assert "needs PostgreSQL" in error


class _KilledShare(ProcessParts):
    """Two shares, the first killed (SIGKILL) as soon as it starts."""

    pids: tuple[int, ...] = ()

    @contextlib.contextmanager
    def start(self, parts: Sequence[Part]) -> Iterator[RunningProcesses]:
        with super().start(parts) as running:
            self.pids = tuple(running.pids)
            os.kill(running.pids[0], signal.SIGKILL)
            yield running


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_share_killed_mid_way_fails_the_rebuild_in_new_tables(
    postgres_url: str, clock: Clock
) -> None:
    """If a share's process is killed before it answers, then the rebuild says that
    share ended without an answer, stops the other, leaves no table of its own, and
    replays in place instead: the tables equal what the follower built."""
    made: list[_KilledShare] = []

    def killed(settings: Settings) -> ProcessParts:
        made.append(_KilledShare(settings, 2, page_size=3, min_events=0))
        return made[-1]

    error = _fallen_back(postgres_url, clock, killed)
    assert error.startswith("RebuildPartError: share 0 of the rebuild ended"), error
    assert "exit code -9" in error
    assert len(made[0].pids) == 2
    assert all(_gone(pid) for pid in made[0].pids)
