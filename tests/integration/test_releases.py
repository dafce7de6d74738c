"""Releases on PostgreSQL and Redis with real worker processes: a chain of jobs on a
cron, a failing middle step, a worker killed with -9 mid-chain, and an ad-hoc DAG.

The scheduler runs on a clock that starts in the past and runs fast (a minute of cron
time per second), so a minutely cron fires often while every run it fires is
already due for the workers, which keep the real time.
"""

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import actor
from tests.integration.conftest import Harness, harness_settings
from tests.integration.test_scheduler import ForcedLeadership

from jobledger.adapters.sql.positions import SqlPositions
from jobledger.bootstrap import bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import Dependency
from jobledger.domain.errors import NotFoundError
from jobledger.domain.execution import (
    Execution,
    ExecutionStatus,
    Trigger,
    occurrence_execution_id,
)
from jobledger.domain.job import FireTrigger, Job, MissReason
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import CronSchedule, ManualSchedule
from jobledger.domain.workflow import StepSpec, StepStatus, WorkflowStatus
from jobledger.infra.settings import load_settings
from jobledger.runtime.releases import Releaser
from jobledger.runtime.scheduler import SchedulerConfig, SchedulerService
from jobledger.services.jobs import Jobs
from jobledger.services.workflows import Workflows

OCCURRENCES = 4
SPEED = 60.0  # cron seconds per real second


class WarpClock:
    """From ``start`` in the past, ``SPEED`` times as fast as real time until it has
    caught up with it; then real time (lease deadlines are the workers' real time)."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self._began = time.monotonic()

    def __call__(self) -> datetime:
        warped = self.start + timedelta(seconds=(time.monotonic() - self._began) * SPEED)
        return min(warped, datetime.now(tz=UTC))


@pytest.fixture
def warped(postgres_url: str, redis_server: str) -> Iterator[tuple[Harness, list[datetime], Any]]:
    """A harness whose scheduler runs on a warp clock through ``OCCURRENCES`` minutes
    that lie in the past; yields it, those minutes, and (the clock's start, a function
    that starts the scheduler)."""
    settings = harness_settings(postgres_url, redis_server, "r")
    now = datetime.now(tz=UTC).replace(second=0, microsecond=0)
    start = now - timedelta(minutes=OCCURRENCES + 2) + timedelta(seconds=50)
    minutes = [start + timedelta(seconds=10 + 60 * i) for i in range(OCCURRENCES)]
    with bootstrap(settings) as built, bootstrap(settings) as second:
        projector = built.projector()
        projector.start()
        running = Harness(built)
        services: list[SchedulerService] = []
        clock = WarpClock(start)

        def go() -> None:
            """Start the scheduler; called again, stop it and start another process's
            (a restart: a new leader, its releases from the stored position)."""
            if services:
                services[-1].stop()
            container = second if services else built
            scheduler = container.scheduler(config=SchedulerConfig(recover_interval=0.2))
            services.append(SchedulerService(scheduler, now=clock))
            services[-1].start()

        try:
            yield running, minutes, (start, go)
        finally:
            for worker in running.workers:
                worker.stop()
            for service in services:
                service.stop()
            projector.stop()


def _job(jobs: Jobs, name: str, at: datetime, **spec: Any) -> Job:
    depends = spec.pop("depends_on", ())
    handler = spec.pop("handler", "test.echo")
    retries = spec.pop("retries", 3)
    definition = JobDefinition(
        name=name,
        spec=ExecutionSpec(
            handler=handler,
            payload=spec,
            retry=RetryPolicy(
                max_retries=retries, initial_backoff=timedelta(milliseconds=200), jitter=False
            ),
        ),
        schedule=ManualSchedule() if depends else CronSchedule("* * * * *"),
        depends_on=tuple(Dependency(job=up.id) for up in depends),
    )
    return jobs.schedule(definition, at=at, by=actor())


def _run_or_none(harness: Harness, run_id: uuid.UUID) -> Execution | None:
    try:
        return harness.execution(run_id)
    except NotFoundError:
        return None


def _first(harness: Harness, run_id: uuid.UUID, kind: type[Any]) -> Any:
    return next(e for e in harness.events(run_id) if isinstance(e, kind))


@pytest.mark.timeout(120)
def test_a_chain_on_a_cron_runs_in_order_through_a_kill_9_and_a_restart(
    warped: tuple[Harness, list[datetime], Any],
) -> None:
    """If A -> B -> C run on a minutely cron, and the worker running a B is killed with
    -9 while the scheduler restarts, then every occurrence of A, B and C runs once, C
    never before its B completed, B never before its A; and if B2 always fails, then
    each C2 occurrence ends as a recorded skip (JobFiresMissed upstream_failed) without
    ever running. Reading the whole log again (releases replayed from position 0)
    writes nothing."""
    harness, minutes, (start, go) = warped
    jobs = Jobs(harness.container.ledger)
    a = _job(jobs, "A", start)
    b = _job(jobs, "B", start, depends_on=[a], handler="test.delay", seconds=1.0)
    c = _job(jobs, "C", start, depends_on=[b])
    a2 = _job(jobs, "A2", start)
    b2 = _job(jobs, "B2", start, depends_on=[a2], handler="test.fail", retries=0)
    c2 = _job(jobs, "C2", start, depends_on=[b2])
    # B2 fails every time: its breaker must not open and defer the rest for 30 s.
    worker = {"worker_slots": "4", "worker_lease_ttl_seconds": "2", "breaker_fail_max": "100"}
    first = harness.start_worker(**worker)
    go()
    doomed = occurrence_execution_id(b.id, minutes[1])
    harness.wait_for(
        lambda: getattr(_run_or_none(harness, doomed), "status", None) is ExecutionStatus.RUNNING,
        40,
    )
    first.kill()
    go()  # and the scheduler restarts, mid-chain
    harness.start_worker(**worker)
    last_c = [occurrence_execution_id(c.id, m) for m in minutes]
    last_c2 = [occurrence_execution_id(c2.id, m) for m in minutes]
    harness.wait_for(
        lambda: (
            all(
                getattr(_run_or_none(harness, r), "status", None) is ExecutionStatus.COMPLETED
                for r in last_c
            )
            and all(_run_or_none(harness, r) is not None for r in last_c2)
        ),
        60,
    )
    for minute in minutes:
        runs = {job.definition.name: occurrence_execution_id(job.id, minute) for job in (a, b, c)}
        for run_id in runs.values():
            assert harness.status(run_id) is ExecutionStatus.COMPLETED
        assert (
            _first(harness, runs["B"], Execution.Leased).timestamp
            >= _first(harness, runs["A"], Execution.Completed).timestamp
        )
        assert (
            _first(harness, runs["C"], Execution.Leased).timestamp
            >= _first(harness, runs["B"], Execution.Completed).timestamp
        )
        result = _first(harness, runs["C"], Execution.Completed).result
        assert str(b.id) in result["upstream"]
        skipped = harness.execution(occurrence_execution_id(c2.id, minute))
        assert skipped.status is ExecutionStatus.SKIPPED
        assert (
            harness.status(occurrence_execution_id(b2.id, minute)) is ExecutionStatus.DEAD_LETTERED
        )
    killed = Counter(type(e).__name__ for e in harness.events(doomed))
    assert (killed["LeaseExpired"], killed["Completed"]) == (1, 1)
    ledger = harness.container.ledger
    for job in (b, c):
        fires = [e for e in ledger.history(job.id) if isinstance(e, Job.Fired)]
        counts = Counter(e.scheduled_for for e in fires)
        # Once caught up, the cron goes on in real time: later minutes fire too.
        assert set(minutes) <= set(counts)
        assert set(counts.values()) == {1}
        assert {e.trigger for e in fires} == {FireTrigger.DEPENDENCY}
    misses = [e for e in ledger.history(c2.id) if isinstance(e, Job.FiresMissed)]
    missed = Counter(e.first for e in misses)
    assert set(minutes) <= set(missed)
    assert set(missed.values()) == {1}
    assert {e.reason for e in misses} == {MissReason.UPSTREAM_FAILED}
    assert not any(isinstance(e, Job.Fired) for e in ledger.history(c2.id))
    _replay_releases(harness)


def _replay_releases(harness: Harness) -> None:
    """Every release again from the start of the log: a crash between saving a page's
    effects and moving the position, at every page. Nothing new is written."""
    container = harness.container
    # A position of its own, from 0: the scheduler's releases, still running, keep
    # moving theirs (and would move a shared one back past the replay's start).
    releaser = Releaser(
        container.ledger,
        container.database,
        ForcedLeadership(epoch=99),
        positions=SqlPositions(container.database),
        position="replay",
    )
    # The scheduler's own releases (and fires) may still add events: count only ours.
    before = releaser.stats.fired + releaser.stats.skipped + releaser.stats.steps
    while releaser.step():
        pass
    assert releaser.stats.pages > 0
    assert releaser.stats.fired + releaser.stats.skipped + releaser.stats.steps == before


def _fan_steps() -> list[StepSpec]:
    """50 steps: a root, 48 in a fan-out of six lanes of eight, each lane a chain whose
    steps also wait for the lane beside them, and a sink that waits for the lanes'
    last steps (fan-in)."""
    spec = ExecutionSpec(handler="test.echo")
    steps = [StepSpec(name="root", spec=spec)]
    for lane in range(6):
        for depth in range(8):
            after = ["root"] if depth == 0 else [f"l{lane}d{depth - 1}"]
            if depth > 0 and lane > 0:
                after.append(f"l{lane - 1}d{depth - 1}")
            steps.append(StepSpec(name=f"l{lane}d{depth}", spec=spec, after=tuple(after)))
    steps.append(StepSpec(name="sink", spec=spec, after=tuple(f"l{lane}d7" for lane in range(6))))
    return steps


@pytest.mark.timeout(120)
def test_a_fifty_step_dag_runs_every_step_once_with_its_upstream_results(harness: Harness) -> None:
    """If a 50-step DAG with fan-out and fan-in runs on two workers, then it completes
    with every step run exactly once, each after all the steps it waits for, and each
    step's handler saw exactly those steps' results."""
    steps = _fan_steps()
    assert len(steps) == 50
    workflows = Workflows(harness.container.ledger)
    workflow = workflows.start(name="fan", steps=steps, at=datetime.now(tz=UTC), by=actor())
    harness.start_worker(worker_slots="8")
    harness.start_worker(worker_slots="8")
    harness.wait_for(lambda: workflows.get(workflow.id).status is not WorkflowStatus.RUNNING, 90)
    done = workflows.get(workflow.id)
    assert done.status is WorkflowStatus.COMPLETED
    assert set(done.states.values()) == {StepStatus.COMPLETED}
    runs = workflows.runs(done)
    finished_at = {}
    for name, run in runs.items():
        events = harness.events(run.id)
        assert Counter(type(e).__name__ for e in events)["Completed"] == 1
        finished_at[name] = _first(harness, run.id, Execution.Completed).timestamp
    for step in steps:
        run = runs[step.name]
        started = _first(harness, run.id, Execution.Leased).timestamp
        assert all(started >= finished_at[up] for up in step.after)
        result = _first(harness, run.id, Execution.Completed).result
        expected = {up: done.results[up] for up in step.after}
        assert result.get("upstream", {}) == expected
    released = [e for e in harness.events(workflow.id) if type(e).__name__ == "StepReleased"]
    assert Counter(e.step for e in released) == Counter(s.name for s in steps)


@pytest.mark.timeout(60)
def test_a_step_its_handler_discards_ends_as_a_failed_step(harness: Harness) -> None:
    """If a workflow's first step is discarded by its own handler, then that is its
    run's end: the step counts as failed and the workflow ends without running the step
    after it, as for a dead letter."""
    discard = ExecutionSpec(handler="test.decide", payload={"decide": "discard", "reason": "moot"})
    steps = [
        StepSpec(name="a", spec=discard),
        StepSpec(name="b", spec=ExecutionSpec(handler="test.echo"), after=("a",)),
    ]
    workflows = Workflows(harness.container.ledger)
    workflow = workflows.start(name="moot", steps=steps, at=datetime.now(tz=UTC), by=actor())
    harness.start_worker()
    harness.wait_for(lambda: workflows.get(workflow.id).status is not WorkflowStatus.RUNNING, 30)
    done = workflows.get(workflow.id)
    assert done.states["a"] is StepStatus.FAILED
    assert done.states["b"] is not StepStatus.COMPLETED
    assert workflows.runs(done)["a"].status is ExecutionStatus.DISCARDED


AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def test_the_end_of_a_run_of_no_job_is_not_loaded_once_its_start_was_read(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a run of no job and no workflow ends, then a releaser that read its first
    event does not load it (its end releases nothing); a releaser that began after that
    event (a restart, a new leader) loads it, as before."""
    settings = load_settings({}, database_url=postgres_url)
    with bootstrap(settings, role="test") as container:
        ledger = container.ledger
        loaded: list[uuid.UUID] = []
        streams = ledger.log_store.streams

        def counted(ids: Any, held: Any) -> Any:
            loaded.extend(ids)
            return streams(ids, held)

        monkeypatch.setattr(ledger.log_store, "streams", counted)

        def releaser() -> Releaser:
            positions = SqlPositions(container.database)
            return Releaser(ledger, container.database, ForcedLeadership(1), positions=positions)

        run = Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo"), ready_at=AT, trigger=Trigger.ADHOC
        )
        ledger.save(run)
        began = releaser()
        assert began.step()
        lease_id = uuid.uuid4()
        run.lease(worker_id="w", lease_id=lease_id, lease_expires_at=AT + timedelta(hours=1))
        run.complete(lease_id=lease_id, duration=timedelta(seconds=1), result={})
        ledger.save(run)
        assert releaser().step()  # started after the first event: it loads the run
        assert loaded == [run.id]
        assert began.step()
        assert loaded == [run.id]
