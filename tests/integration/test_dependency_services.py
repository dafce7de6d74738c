"""Dependencies and backfill through the use cases, on SQLite and PostgreSQL: cycles
refused (also when two edits race), and backfills that never fire an occurrence twice."""

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from tests.conftest import actor
from tests.integration.test_scheduler import ForcedLeadership

from jobledger.adapters.store import open_ledger
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import Dependency
from jobledger.domain.errors import InvalidDefinitionError, InvalidTransitionError, NotFoundError
from jobledger.domain.execution import Execution, occurrence_execution_id
from jobledger.domain.job import FireTrigger, Job
from jobledger.domain.policies import BackfillOverlap
from jobledger.domain.schedules import CronSchedule, ManualSchedule
from jobledger.infra.settings import Settings
from jobledger.persistence.ledger import Ledger
from jobledger.services.jobs import Jobs

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WEEK_START = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
WEEK_END = WEEK_START + timedelta(days=7) - timedelta(hours=1)  # 168 hourly occurrences


def definition(name: str, *upstreams: Job, schedule: Any = None) -> JobDefinition:
    return JobDefinition(
        name=name,
        spec=ExecutionSpec(handler="test.echo"),
        schedule=schedule or ManualSchedule(),
        depends_on=tuple(Dependency(job=up.id) for up in upstreams),
    )


def depend(jobs: Jobs, job: Job, *upstreams: Job) -> Job:
    changed = msgspec.structs.replace(
        job.definition, depends_on=tuple(Dependency(job=up.id) for up in upstreams)
    )
    return jobs.update(job.id, changed, at=NOW, by=actor())


@pytest.fixture
def jobs(ledger: Ledger) -> Jobs:
    return Jobs(ledger)


def test_a_direct_cycle_is_refused_naming_the_path(jobs: Jobs) -> None:
    """If B waits for A, then making A wait for B is refused with the path A -> B -> A,
    and nothing is written."""
    a = jobs.schedule(definition("A"), at=NOW, by=actor())
    b = jobs.schedule(definition("B", a), at=NOW, by=actor())
    head = jobs.ledger.recorder.max_notification_id()
    with pytest.raises(InvalidDefinitionError) as refused:
        depend(jobs, a, b)
    assert refused.value.field == "depends_on"
    assert "A -> B -> A" in refused.value.problem
    assert jobs.ledger.recorder.max_notification_id() == head
    assert jobs.get(a.id).definition.depends_on == ()


def test_an_indirect_cycle_and_a_creating_one_are_refused(jobs: Jobs) -> None:
    """If C waits for B and B for A, then A waiting for C is refused (A -> C -> B -> A);
    a new job may wait for any of them."""
    a = jobs.schedule(definition("A"), at=NOW, by=actor())
    b = jobs.schedule(definition("B", a), at=NOW, by=actor())
    c = jobs.schedule(definition("C", b), at=NOW, by=actor())
    with pytest.raises(InvalidDefinitionError, match="A -> C -> B -> A"):
        depend(jobs, a, c)
    d = jobs.schedule(definition("D", a, c), at=NOW, by=actor())
    assert [j.id for j in jobs.upstreams(d.id)] == [a.id, c.id]
    assert {j.id for j in jobs.downstreams(a.id)} == {b.id, d.id}


def test_an_upstream_must_exist_and_a_job_waited_for_cannot_be_deleted(jobs: Jobs) -> None:
    """If a job names an upstream that does not exist, then it is refused naming the
    field; a job others wait for cannot be deleted until they stop waiting."""
    ghost = JobDefinition(
        name="ghost",
        spec=ExecutionSpec(handler="test.echo"),
        depends_on=(Dependency(job=uuid.uuid4()),),
    )
    with pytest.raises(InvalidDefinitionError) as refused:
        jobs.schedule(ghost, at=NOW, by=actor())
    assert refused.value.field == "depends_on[0].job"
    a = jobs.schedule(definition("A"), at=NOW, by=actor())
    b = jobs.schedule(definition("B", a), at=NOW, by=actor())
    with pytest.raises(InvalidTransitionError, match="B depend on it"):
        jobs.delete(a.id, by=actor())
    depend(jobs, b)
    assert jobs.delete(a.id, by=actor()).deleted


def test_two_racing_edits_that_close_a_cycle_together_do_not_both_commit(
    store_settings: Settings,
) -> None:
    """If two processes each add one edge (A waits for B; B waits for A), both having
    read the graph before either saved, then exactly one commits and the other is
    refused naming the cycle: the graph's version is the fence."""
    first, second = open_ledger(store_settings), open_ledger(store_settings)
    try:
        setup = Jobs(first)
        a = setup.schedule(definition("A"), at=NOW, by=actor())
        b = setup.schedule(definition("B"), at=NOW, by=actor())
        c = setup.schedule(definition("C", a), at=NOW, by=actor())  # the graph exists
        both_read = threading.Barrier(2, timeout=10)
        outcomes: dict[str, object] = {}

        def edit(ledger: Ledger, name: str, job: Job, upstream: Job) -> None:
            original = ledger.dependency_graph
            calls = iter(range(1_000))

            def read_then_wait() -> Any:
                graph = original()
                if next(calls) == 0:
                    both_read.wait()  # the other edit has read the same version
                return graph

            ledger.dependency_graph = read_then_wait  # type: ignore[method-assign]
            try:
                outcomes[name] = depend(Jobs(ledger), job, upstream)
            except InvalidDefinitionError as error:
                outcomes[name] = error

        threads = [
            threading.Thread(target=edit, args=(first, "a", a, b)),
            threading.Thread(target=edit, args=(second, "b", b, a)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        kinds = Counter(type(o).__name__ for o in outcomes.values())
        assert kinds == Counter({"Job": 1, "InvalidDefinitionError": 1})
        refused = next(o for o in outcomes.values() if isinstance(o, InvalidDefinitionError))
        assert "closes a cycle" in refused.problem
        graph = Jobs(first).ledger.dependency_graph()
        assert graph is not None
        assert (a.id in graph.upstreams) != (b.id in graph.upstreams)
        assert graph.upstreams[c.id] == (a.id,)
    finally:
        first.close()
        second.close()


# ---- backfill ---------------------------------------------------------------------------


@pytest.fixture
def container(store_settings: Settings) -> Iterator[Container]:
    with bootstrap(store_settings) as built:
        yield built


def hourly(jobs: Jobs, *, paused: bool = False) -> Job:
    job = jobs.schedule(
        definition("hourly", schedule=CronSchedule("0 * * * *")), at=WEEK_START, by=actor()
    )
    return jobs.pause(job.id, by=actor()) if paused else job


def fired_occurrences(ledger: Ledger, job_id: uuid.UUID) -> list[datetime]:
    return [
        e.scheduled_for
        for e in ledger.history(job_id)
        if isinstance(e, Job.Fired) and e.trigger is FireTrigger.BACKFILL
    ]


def test_a_week_of_hourly_backfill_fires_only_the_missing_and_once(container: Container) -> None:
    """If a paused hourly job is backfilled over a 7-day window after 24 of its 168
    occurrences already fired, then the dry run counts 168 / 24 / 144 and writes
    nothing, the run fires exactly the 144 in order, and a second backfill of the same
    window fires none."""
    jobs = Jobs(container.ledger)
    job = hourly(jobs, paused=True)
    day = WEEK_START + timedelta(days=2)
    first = jobs.backfill(job.id, start=day, end=day + timedelta(hours=23), at=NOW, by=actor())
    assert (first.occurrences, first.fired) == (24, 24)
    head = container.head()
    dry = jobs.backfill(job.id, start=WEEK_START, end=WEEK_END, dry_run=True, at=NOW, by=actor())
    assert (dry.occurrences, dry.already_fired, dry.to_fire, dry.fired) == (168, 24, 144, 144)
    assert container.head() == head
    report = jobs.backfill(job.id, start=WEEK_START, end=WEEK_END, reason="gap", at=NOW, by=actor())
    assert (report.occurrences, report.already_fired, report.to_fire, report.fired) == (
        168,
        24,
        144,
        144,
    )
    fired = fired_occurrences(container.ledger, job.id)
    assert len(fired) == 168
    assert len(set(fired)) == 168
    assert fired[24:] == sorted(fired[24:])
    again = jobs.backfill(job.id, start=WEEK_START, end=WEEK_END, at=NOW, by=actor())
    assert (again.already_fired, again.to_fire, again.fired) == (168, 0, 0)
    assert len(fired_occurrences(container.ledger, job.id)) == 168
    assert jobs.get(job.id).paused
    # The schedule index follows backfills without setting anything aside.
    index = container.scheduler(ForcedLeadership(epoch=1)).index
    index.catch_up()
    assert set(container.quarantine().counts().values()) == {0}
    assert index.due(NOW, limit=10) == []


def test_backfill_refuses_the_future_and_too_many(container: Container) -> None:
    """If a backfill's end is after now, its start before the range a schedule may name,
    or more would fire than max, then it is refused naming the field, and nothing is
    written."""
    jobs = Jobs(container.ledger)
    job = hourly(jobs, paused=True)  # a paused job's occurrences are all a backfill's
    head = container.head()
    with pytest.raises(InvalidDefinitionError) as future:
        jobs.backfill(job.id, start=WEEK_START, end=NOW + timedelta(hours=1), at=NOW, by=actor())
    assert future.value.field == "end"
    with pytest.raises(InvalidDefinitionError) as too_many:
        jobs.backfill(job.id, start=WEEK_START, end=WEEK_END, limit=100, at=NOW, by=actor())
    assert too_many.value.field == "max"
    year_one = datetime(1, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidDefinitionError) as too_early:
        jobs.backfill(job.id, start=year_one, end=WEEK_START, at=NOW, by=actor())
    assert too_early.value.field == "start"
    assert container.head() == head


def _finish(container: Container, execution_id: uuid.UUID) -> None:
    """Run the execution to completion as a worker would report it."""
    run = container.ledger.get_execution(execution_id)
    lease = uuid.uuid4()
    run.lease(worker_id="w", lease_id=lease, lease_expires_at=NOW + timedelta(minutes=1))
    run.complete(lease_id=lease, duration=timedelta(seconds=1), result={})
    container.ledger.save_all(run)


def test_buffer_all_fires_one_at_a_time_and_skip_fires_one(container: Container) -> None:
    """If three occurrences are backfilled with buffer_all, then one fires, and each
    next one fires only once the releases see the previous run end; with skip, one
    fires and the others are recorded missed as overlapping it."""
    jobs = Jobs(container.ledger)
    job = hourly(jobs, paused=True)
    end = WEEK_START + timedelta(hours=2)
    report = jobs.backfill(
        job.id, start=WEEK_START, end=end, overlap=BackfillOverlap.BUFFER_ALL, at=NOW, by=actor()
    )
    assert (report.fired, report.buffered) == (1, 2)
    releaser = container.releaser(ForcedLeadership(epoch=1))
    for hour in range(3):
        occurrence = WEEK_START + timedelta(hours=hour)
        assert fired_occurrences(container.ledger, job.id)[-1] == occurrence
        while releaser.step():
            pass
        assert len(fired_occurrences(container.ledger, job.id)) == hour + 1  # not before the end
        _finish(container, occurrence_execution_id(job.id, occurrence))
        while releaser.step():
            pass
    assert len(fired_occurrences(container.ledger, job.id)) == 3
    other = jobs.schedule(
        definition("other", schedule=CronSchedule("0 * * * *")), at=WEEK_START, by=actor()
    )
    other = jobs.pause(other.id, by=actor())  # else 01:00 on is the scheduler's to fire
    skipped = jobs.backfill(
        other.id, start=WEEK_START, end=end, overlap=BackfillOverlap.SKIP, at=NOW, by=actor()
    )
    assert (skipped.fired, skipped.skipped) == (1, 2)
    misses = [e for e in container.ledger.history(other.id) if isinstance(e, Job.FiresMissed)]
    assert [(m.first, m.count) for m in misses] == [(WEEK_START + timedelta(hours=1), 2)]
    assert isinstance(
        container.ledger.get_execution(occurrence_execution_id(other.id, WEEK_START)), Execution
    )


def test_pause_on_failure_pauses_the_job_by_system_naming_the_dead_letter(
    container: Container,
) -> None:
    """If a job with pause_on_failure has a run dead-lettered, then the releases pause
    it by system, naming the execution; a replay of the same dead letter after an
    operator resumed the job does not pause it again."""
    jobs = Jobs(container.ledger)
    watched = jobs.schedule(
        msgspec.structs.replace(
            definition("watched", schedule=CronSchedule("0 * * * *")), pause_on_failure=True
        ),
        at=NOW,
        by=actor(),
    )
    run = jobs.trigger(watched.id, key="once", at=NOW, by=actor())
    lease = uuid.uuid4()
    failing = container.ledger.get_execution(run.id)
    failing.lease(worker_id="w", lease_id=lease, lease_expires_at=NOW + timedelta(minutes=1))
    failing.fail(lease_id=lease, error="boom", at=NOW)
    # The default budget: fail each attempt until the last one dead-letters it.
    while failing.status.value != "dead_lettered":
        container.ledger.save_all(failing)
        failing = container.ledger.get_execution(run.id)
        lease = uuid.uuid4()
        failing.lease(worker_id="w", lease_id=lease, lease_expires_at=NOW + timedelta(minutes=1))
        failing.fail(lease_id=lease, error="boom", at=NOW)
    container.ledger.save_all(failing)
    releaser = container.releaser(ForcedLeadership(epoch=1))
    while releaser.step():
        pass
    paused = jobs.get(watched.id)
    assert paused.paused
    event = [e for e in container.ledger.history(watched.id) if isinstance(e, Job.Paused)][-1]
    assert (event.by, event.execution_id) == ("system", run.id)
    jobs.resume(watched.id, at=datetime.now(tz=UTC), by=actor())
    with container.database.transaction() as cursor:
        cursor.execute("UPDATE jobledger_positions SET position = 0 WHERE name = 'releases'")
    again = container.releaser(ForcedLeadership(epoch=2))
    while again.step():
        pass
    assert not jobs.get(watched.id).paused


def test_a_backfill_leaves_the_schedulers_next_occurrence_to_the_scheduler(
    container: Container,
) -> None:
    """If an hourly job's scheduler is behind (its next occurrence is already due) and
    the window of a backfill reaches past it, then the backfill fires only the
    occurrences before it, and the scheduler's next tick fires that occurrence itself
    and moves the job on, with no conflict."""
    jobs = Jobs(container.ledger)
    job = hourly(jobs)  # created at WEEK_START: its next occurrence is 01:00 that day
    due = jobs.get(job.id).next_fire_at
    assert due == WEEK_START + timedelta(hours=1)
    report = jobs.backfill(
        job.id,
        start=WEEK_START - timedelta(hours=3),
        end=WEEK_START + timedelta(hours=4),
        at=NOW,
        by=actor(),
    )
    assert report.fired == 4  # 21:00 to 00:00: the job was created at 00:00, due 01:00
    assert due not in fired_occurrences(container.ledger, job.id)
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    ticked = scheduler.tick(WEEK_START + timedelta(hours=1, seconds=1))
    assert (ticked.fired, ticked.conflicts) == (1, 0), ticked
    fires = [e for e in container.ledger.history(job.id) if isinstance(e, Job.Fired)]
    assert [(e.scheduled_for, e.trigger) for e in fires[-1:]] == [(due, FireTrigger.SCHEDULE)]
    assert jobs.get(job.id).next_fire_at == WEEK_START + timedelta(hours=2)


def test_a_run_that_no_longer_loads_is_isolated_and_other_releases_go_on(
    container: Container,
) -> None:
    """If a completed upstream run's stream holds an event this release cannot read,
    then the releases quarantine that run's end (named under the releases follower),
    move past it, and still release the downstream of an unrelated job."""
    jobs = Jobs(container.ledger)
    up_a = jobs.schedule(definition("A", schedule=CronSchedule("0 * * * *")), at=NOW, by=actor())
    down_a = jobs.schedule(definition("D", up_a), at=NOW, by=actor())
    up_b = jobs.schedule(definition("B", schedule=CronSchedule("0 * * * *")), at=NOW, by=actor())
    down_b = jobs.schedule(definition("E", up_b), at=NOW, by=actor())
    occurrence = NOW - timedelta(hours=1)
    runs = {}
    for job in (up_a, up_b):
        report = jobs.backfill(job.id, start=occurrence, end=occurrence, at=NOW, by=actor())
        assert report.fired == 1
        runs[job.id] = occurrence_execution_id(job.id, occurrence)
    _finish(container, runs[up_a.id])
    broken = container.ledger.get_execution(runs[up_a.id])
    container.ledger.recorder.insert_events(
        [
            StoredEvent(
                originator_id=broken.id,
                originator_version=broken.version + 1,
                topic="jobledger:ExecutionProgressed",
                state=b'{"shape": "of a later release"}',
            )
        ]
    )
    _finish(container, runs[up_b.id])
    releaser = container.releaser(ForcedLeadership(epoch=1))
    while releaser.step():
        pass
    released = container.ledger.get_execution(occurrence_execution_id(down_b.id, occurrence))
    assert released.job_id == down_b.id
    with pytest.raises(NotFoundError):
        container.ledger.get_execution(occurrence_execution_id(down_a.id, occurrence))
    quarantined = container.quarantine().events()
    assert [(q.follower, q.originator_id) for q in quarantined] == [("releases", str(broken.id))]
    assert releaser.position() == container.head()
