"""The event store contract, run on SQLite and PostgreSQL."""

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.utils import get_topic
from tests.conftest import actor

from jobledger.adapters.store import open_ledger
from jobledger.domain.backfill import plan_backfill, window_occurrences
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import Dependency, DependencyGraph
from jobledger.domain.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidDefinitionError,
    NotFoundError,
)
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.domain.job import Job
from jobledger.domain.policies import (
    BackfillOverlap,
    MisfirePolicy,
    OnFailure,
    OverlapPolicy,
    RetryPolicy,
)
from jobledger.domain.progress import Progress
from jobledger.domain.schedules import CronSchedule, ManualSchedule, MissedFires
from jobledger.domain.topics import event_topics
from jobledger.domain.workflow import StepSpec, StepStatus, Workflow
from jobledger.infra.settings import Settings
from jobledger.persistence.ledger import Ledger
from jobledger.services.executions import Executions
from jobledger.services.jobs import Jobs

AT = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)


def definition(name: str = "nightly report", cron: str = "30 2 * * *") -> JobDefinition:
    return JobDefinition(
        name=name,
        spec=ExecutionSpec(
            handler="test.echo",
            payload={"n": 1, "tags": ["a", "b"], "nested": {"x": None}},
            queue="reports",
            priority=7,
            timeout=timedelta(seconds=90),
            retry=RetryPolicy(max_retries=1, initial_backoff=timedelta(milliseconds=250)),
        ),
        schedule=CronSchedule(cron, "Europe/Berlin"),
        misfire=MisfirePolicy.FIRE_ALL,
        catch_up_cap=3,
        overlap=OverlapPolicy.QUEUE_ONE,
    )


def every_event_type() -> list[DomainEventProtocol[uuid.UUID]]:
    """One history that holds each event type of both aggregates at least once."""
    job = Job.schedule(definition(), at=AT, by="alice", key="report-1")
    assert job.next_fire_at is not None
    missed_at = job.next_fire_at
    job.record_missed_fires(
        MissedFires(first=missed_at, last=missed_at, count=1), policy=MisfirePolicy.SKIP
    )
    assert job.next_fire_at is not None
    fired = job.fire(scheduled_for=job.next_fire_at, leader_epoch=3, at=job.next_fire_at)
    job.update(definition(cron="0 4 * * *"), at=AT, by="bob")
    job.pause(by="bob", reason="maintenance")
    job.resume(at=AT, by="bob")
    triggered = job.trigger(trigger_key="manual-1", at=AT, by="carol")
    job.delete(by="carol")
    lease_1, lease_2, lease_3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    fired.lease(worker_id="w1", lease_id=lease_1, lease_expires_at=AT + timedelta(minutes=1))
    fired.defer(lease_id=lease_1, reason="circuit open", ready_at=AT + timedelta(seconds=30))
    fired.lease(worker_id="w1", lease_id=lease_2, lease_expires_at=AT)
    fired.expire_lease(lease_id=lease_2, at=AT)  # LeaseExpired + Retried
    fired.lease(worker_id="w2", lease_id=lease_3, lease_expires_at=AT)
    fired.fail(lease_id=lease_3, error="HTTP 503", at=AT)  # DeadLettered
    fired.requeue(by="dave", reason="endpoint fixed", at=AT)
    lease_4 = uuid.uuid4()
    fired.lease(worker_id="w2", lease_id=lease_4, lease_expires_at=AT)
    fired.report_progress(
        lease_id=lease_4,
        progress=Progress(percent=62.5, message="loading", data={"rows": 625, "of": 1000}),
    )
    fired.complete(lease_id=lease_4, duration=timedelta(seconds=1.5), result={"status": 200})
    triggered.cancel(by="carol", reason="not needed")
    dropped = Execution.enqueue(
        spec=ExecutionSpec(handler="test.fail", retry=RetryPolicy(max_retries=0)),
        ready_at=AT,
        trigger=Trigger.ADHOC,
    )
    lease_5 = uuid.uuid4()
    dropped.lease(worker_id="w3", lease_id=lease_5, lease_expires_at=AT)
    dropped.fail(lease_id=lease_5, error="poison", at=AT)
    dropped.discard(by="erin", reason="obsolete report")
    # A job code manages: its events carry the source, and a change by hand the override.
    managed = Job.declare(definition(), key="billing.monthly", incarnation=0, at=AT, by="ci")
    managed.update(definition(cron="0 5 * * *"), at=AT, by="frank", override=True)
    managed.delete(by="ci", source="code")
    return [
        *job.collect_events(),
        *managed.collect_events(),
        *fired.collect_events(),
        *triggered.collect_events(),
        *dropped.collect_events(),
    ]


def test_every_event_type_round_trips_with_its_types(ledger: Ledger) -> None:
    """If every event type is saved and read back, then values and their types are equal."""
    events = every_event_type()
    names = {type(e).__name__ for e in events}
    assert len(names) == 19
    ledger.save(*events)
    for original in events:
        stored = list(ledger.history(original.originator_id))[original.originator_version - 1]
        assert type(stored) is type(original)
        assert stored == original
        for name, value in vars(original).items():
            assert type(vars(stored)[name]) is type(value), name


def test_two_writers_saving_the_same_version_one_wins(
    store_settings: Settings, ledger: Ledger
) -> None:
    """If two processes save the same aggregate version at once, then exactly one wins."""
    job = Jobs(ledger).schedule(definition(), at=AT, by=actor("alice"))
    other = open_ledger(store_settings)
    try:
        copies = [ledger.get_job(job.id), other.get_job(job.id)]
        copies[0].pause(by="a")
        copies[1].update(definition(name="renamed"), at=AT, by="b")
        outcomes: list[str] = []
        barrier = threading.Barrier(2)

        def save(app: Ledger, aggregate: Job) -> None:
            barrier.wait()
            try:
                app.save_all(aggregate)
                outcomes.append("saved")
            except ConflictError:
                outcomes.append("conflict")

        threads = [
            threading.Thread(target=save, args=(app, agg))
            for app, agg in zip([ledger, other], copies, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["conflict", "saved"]
        assert ledger.get_job(job.id).version == 2
    finally:
        other.close()


def test_firing_the_same_occurrence_twice_yields_one_execution(ledger: Ledger) -> None:
    """If two schedulers fire the same occurrence, then the store keeps one execution."""
    job = Jobs(ledger).schedule(definition(), at=AT, by=actor("alice"))
    first, second = ledger.get_job(job.id), ledger.get_job(job.id)
    due = first.next_fire_at
    assert due is not None
    ex_1 = first.fire(scheduled_for=due, leader_epoch=1, at=due)
    ex_2 = second.fire(scheduled_for=due, leader_epoch=2, at=due)
    assert ex_1.id == ex_2.id
    ledger.save_all(first, ex_1)
    with pytest.raises(ConflictError):
        ledger.save_all(second, ex_2)
    # Even a second scheduler that fires from a stale job copy alone cannot make another.
    stale = Execution.enqueue(
        job_id=job.id, scheduled_for=due, spec=ex_1.spec, ready_at=due, trigger=ex_1.trigger
    )
    assert stale.id == ex_1.id
    with pytest.raises(ConflictError):
        ledger.save_all(stale)
    fired = [e for e in ledger.history(job.id) if type(e).__name__ == "Fired"]
    assert len(fired) == 1
    assert ledger.get_execution(ex_1.id).status is ExecutionStatus.PENDING


def test_creating_a_job_with_the_same_key_is_idempotent(ledger: Ledger) -> None:
    """If a create is repeated with the same key, then the first job is returned."""
    first = Jobs(ledger).schedule(definition(), at=AT, by=actor("a"), key="k-1")
    again = Jobs(ledger).schedule(definition(), at=AT, by=actor("a"), key="k-1")
    assert again.id == first.id
    with pytest.raises(AlreadyExistsError, match="another definition"):
        Jobs(ledger).schedule(definition(name="other"), at=AT, by=actor("a"), key="k-1")


def test_a_job_reads_back_as_of_a_version(ledger: Ledger) -> None:
    """If a job changed, then each past version can still be read back."""
    job = Jobs(ledger).schedule(definition(), at=AT, by=actor("a"))
    Jobs(ledger).update(job.id, definition(name="second name"), at=AT, by=actor("b"))
    Jobs(ledger).pause(job.id, by=actor("c"))
    assert ledger.get_job(job.id, version=1).definition.name == "nightly report"
    assert ledger.get_job(job.id, version=2).definition.name == "second name"
    assert ledger.get_job(job.id).paused
    later = datetime.now(tz=UTC) + timedelta(seconds=5)
    assert ledger.job_as_of(job.id, later).paused


def test_as_of_finds_the_last_version_recorded_at_or_before_each_time(
    ledger: Ledger,
) -> None:
    """If a job has 40 versions, then as of each event's time, a microsecond before it
    and after it, the job is the last version whose event is not later than that time,
    as a reading of the whole history says; before the first event there is no job."""
    job = Jobs(ledger).schedule(definition(), at=AT, by=actor("a"))
    for n in range(39):
        Jobs(ledger).update(job.id, definition(name=f"name {n}"), at=AT, by=actor("b"))
    times = [e.timestamp for e in ledger.history(job.id)]
    tick = timedelta(microseconds=1)
    for at in sorted({t + d for t in times for d in (-tick, timedelta(0), tick)}):
        expected = max((v for v, t in enumerate(times, 1) if t <= at), default=None)
        if expected is None:
            with pytest.raises(NotFoundError, match="did not exist"):
                ledger.job_as_of(job.id, at)
            continue
        assert ledger.job_as_of(job.id, at).version == expected


def test_trigger_and_adhoc_runs_are_idempotent_by_key(ledger: Ledger) -> None:
    """If a trigger or ad-hoc run repeats its key, then no second execution is made."""
    job = Jobs(ledger).schedule(definition(), at=AT, by=actor("a"))
    one = Jobs(ledger).trigger(job.id, key="t1", at=AT, by=actor("a"))
    two = Jobs(ledger).trigger(job.id, key="t1", at=AT, by=actor("a"))
    assert one.id == two.id
    spec = ExecutionSpec(handler="test.echo")
    assert (
        Executions(ledger).run(spec, key="x", at=AT, by=actor()).id
        == Executions(ledger).run(spec, key="x", at=AT, by=actor()).id
    )
    triggered = [e for e in ledger.history(job.id) if type(e).__name__ == "Triggered"]
    assert len(triggered) == 1


def test_notifications_follow_the_order_of_saves(ledger: Ledger) -> None:
    """If events are saved, then the notification log lists them in order, once each."""
    events = every_event_type()
    ledger.save(*events)
    notifications = ledger.recorder.select_notifications(start=1, limit=1000)
    assert [(n.originator_id, n.originator_version) for n in notifications] == [
        (e.originator_id, e.originator_version) for e in events
    ]
    decoded: list[Any] = [ledger.mapper.to_domain_event(n) for n in notifications]
    assert decoded == events


def test_limits_come_from_the_settings(store_settings: Settings) -> None:
    """If the settings raise the minimum interval, then a tighter cron is refused."""
    strict = msgspec.structs.replace(store_settings, min_interval_seconds=300.0)
    ledger = open_ledger(strict)
    try:
        with pytest.raises(InvalidDefinitionError) as caught:
            Jobs(ledger).schedule(definition(cron="*/2 * * * *"), at=AT, by=actor("a"))
        assert caught.value.field == "schedule.expression"
        assert ledger.recorder.max_notification_id() in {None, 0}
    finally:
        ledger.close()


# ---- workflows, dependencies and backfill ---------------------------------------------


def workflow_and_dependency_events() -> list[DomainEventProtocol[uuid.UUID]]:
    """One history holding each event type of workflows, the dependency graph and the
    job and execution events that came with them."""
    upstream = Job.schedule(definition(), at=AT, by="alice")
    down_definition = msgspec.structs.replace(
        definition(), schedule=ManualSchedule(), depends_on=(Dependency(job=upstream.id),)
    )
    downstream = Job.schedule(down_definition, at=AT, by="alice")
    graph = DependencyGraph()
    graph.link(downstream.id, [upstream.id])
    released = downstream.fire_dependency(scheduled_for=AT, at=AT, upstream_results={"u": {"n": 1}})
    later = AT + timedelta(days=1)
    skipped = downstream.skip_dependency(
        scheduled_for=later, at=later, failed={uuid.uuid4(): "dead_lettered"}
    )
    downstream.mirror_upstream_misses(upstream.id, MissedFires(first=later, last=later, count=1))
    occurrences = window_occurrences(upstream.definition.schedule, AT - timedelta(days=3), AT)
    plan = plan_backfill(
        upstream.definition.schedule,
        occurrences,
        start=AT - timedelta(days=3),
        end=AT,
        overlap=BackfillOverlap.BUFFER_ALL,
        fired=set(),
    )
    backfills = upstream.backfill(plan, at=AT, by="bob", reason="gap")
    steps = [
        StepSpec(name="a", spec=ExecutionSpec(handler="test.echo")),
        StepSpec(name="b", spec=ExecutionSpec(handler="test.echo"), after=("a",)),
        StepSpec(name="c", spec=ExecutionSpec(handler="test.echo")),
    ]
    done, _ = Workflow.start(name="wf", steps=steps[:2], on_failure=OnFailure.STOP, at=AT, by="c")
    done.settle("a", status=StepStatus.COMPLETED, result={"x": 1}, error=None, at=AT)
    done.settle("b", status=StepStatus.COMPLETED, result=None, error=None, at=AT)
    failed, _ = Workflow.start(name="wf2", steps=steps, on_failure=OnFailure.STOP, at=AT, by="c")
    failed.settle("a", status=StepStatus.FAILED, result=None, error="boom", at=AT)
    cancelled, _ = Workflow.start(name="wf3", steps=steps, on_failure=OnFailure.STOP, at=AT, by="c")
    cancelled.cancel(by="d", reason="enough")
    assert released is not None
    assert skipped is not None
    return [
        *upstream.collect_events(),
        *downstream.collect_events(),
        *graph.collect_events(),
        *released.collect_events(),
        *skipped.collect_events(),
        *(event for run in backfills for event in run.collect_events()),
        *done.collect_events(),
        *failed.collect_events(),
        *cancelled.collect_events(),
    ]


def test_workflow_dependency_and_backfill_events_round_trip(ledger: Ledger) -> None:
    """If every workflow and dependency-graph event type, and the job and execution
    events of backfills and dependencies, are saved and read back, then values and
    their types are equal."""
    events = workflow_and_dependency_events()
    topics = {get_topic(type(e)) for e in events}
    assert set(event_topics(Workflow)) - {Workflow.Created.TOPIC} <= topics
    assert set(event_topics(DependencyGraph)) <= topics
    assert {Job.Backfilled.TOPIC, Execution.Skipped.TOPIC} <= topics
    ledger.save(*events)
    for original in events:
        stored = list(ledger.history(original.originator_id))[original.originator_version - 1]
        assert type(stored) is type(original)
        assert stored == original
        for name, value in vars(original).items():
            assert type(vars(stored)[name]) is type(value), name
