"""The Job aggregate: firing, missed fires, pausing, triggering."""

from datetime import UTC, datetime, timedelta

import pytest

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import InvalidTransitionError, JobNotActiveError
from jobledger.domain.execution import ExecutionStatus, Trigger, occurrence_execution_id
from jobledger.domain.job import Job, MissReason, job_id_for_key
from jobledger.domain.policies import MisfirePolicy
from jobledger.domain.schedules import CronSchedule, ManualSchedule, MissedFires, OneShotSchedule

AT = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)


def hourly(zone: str = "UTC") -> JobDefinition:
    return JobDefinition(
        name="hourly",
        spec=ExecutionSpec(handler="test.echo", payload={"a": 1}, priority=8),
        schedule=CronSchedule("0 * * * *", zone),
    )


def test_a_scheduled_job_knows_its_next_fire() -> None:
    """If a cron job is scheduled at T, then next_fire_at is the first fire after T."""
    job = Job.schedule(hourly(), at=AT + timedelta(minutes=5), by="a")
    assert job.next_fire_at == AT + timedelta(hours=1)


def test_fire_enqueues_the_occurrence_and_moves_on() -> None:
    """If the due occurrence fires, then an execution with its id exists and the next is set."""
    job = Job.schedule(hourly(), at=AT - timedelta(minutes=1), by="a")
    assert job.next_fire_at == AT
    execution = job.fire(scheduled_for=AT, leader_epoch=4, at=AT + timedelta(seconds=2))
    assert execution.id == occurrence_execution_id(job.id, AT)
    assert execution.status is ExecutionStatus.PENDING
    assert execution.trigger is Trigger.SCHEDULE
    assert execution.spec == job.definition.spec
    assert execution.ready_at == AT + timedelta(seconds=2)
    assert job.next_fire_at == AT + timedelta(hours=1)
    fired = job.pending_events[-1]
    assert vars(fired)["leader_epoch"] == 4


def test_only_the_next_occurrence_can_fire() -> None:
    """If a scheduler fires an occurrence that is not the next one, then it is refused."""
    job = Job.schedule(hourly(), at=AT - timedelta(minutes=1), by="a")
    job.fire(scheduled_for=AT, leader_epoch=1, at=AT)
    with pytest.raises(InvalidTransitionError, match="not the next occurrence"):
        job.fire(scheduled_for=AT, leader_epoch=1, at=AT)


def test_a_paused_or_deleted_job_does_not_fire() -> None:
    """If a job is paused or deleted, then fire() raises JobNotActiveError."""
    job = Job.schedule(hourly(), at=AT - timedelta(minutes=1), by="a")
    job.pause(by="op", reason="maintenance")
    assert job.next_fire_at is None
    with pytest.raises(JobNotActiveError, match="paused"):
        job.fire(scheduled_for=AT, leader_epoch=1, at=AT)
    job.resume(at=AT + timedelta(hours=3, minutes=30), by="op")
    assert job.next_fire_at == AT + timedelta(hours=4)
    job.delete(by="op")
    with pytest.raises(JobNotActiveError, match="deleted"):
        job.fire(scheduled_for=AT + timedelta(hours=4), leader_epoch=1, at=AT)
    with pytest.raises(InvalidTransitionError, match="deleted"):
        job.update(hourly(), at=AT, by="op")


def test_missed_fires_are_recorded_and_skipped() -> None:
    """If occurrences were missed, then FiresMissed records them and the next moves past."""
    job = Job.schedule(hourly(), at=AT - timedelta(minutes=1), by="a")
    missed = MissedFires(first=AT, last=AT + timedelta(hours=2), count=3)
    job.record_missed_fires(missed, policy=MisfirePolicy.SKIP)
    assert job.next_fire_at == AT + timedelta(hours=3)
    event = vars(job.pending_events[-1])
    assert (event["count"], event["policy"], event["reason"]) == (3, "skip", MissReason.DOWNTIME)


def test_one_shot_job_fires_once() -> None:
    """If a one-shot job fires, then it has no next fire."""
    definition = JobDefinition(
        name="once", spec=ExecutionSpec(handler="test.echo"), schedule=OneShotSchedule(AT)
    )
    job = Job.schedule(definition, at=AT - timedelta(days=1), by="a")
    assert job.next_fire_at == AT
    job.fire(scheduled_for=AT, leader_epoch=1, at=AT)
    assert job.next_fire_at is None


def once(run_at: datetime) -> JobDefinition:
    return JobDefinition(
        name="once", spec=ExecutionSpec(handler="test.echo"), schedule=OneShotSchedule(run_at)
    )


@pytest.mark.parametrize(
    ("run_at", "saved_at"),
    [
        (AT, AT - timedelta(days=1)),  # ahead: due at run_at
        (AT, AT),  # now
        (AT, AT + timedelta(seconds=5)),  # a moment ago, e.g. the client's clock is behind
        (AT, AT + timedelta(days=2)),  # long ago: the misfire policy decides when it is due
    ],
)
def test_a_one_shot_that_never_ran_is_due_at_its_time(run_at: datetime, saved_at: datetime) -> None:
    """If a one-shot job is created, then its next fire is its run_at, past or not: an
    occurrence that never ran is late, not lost."""
    assert Job.schedule(once(run_at), at=saved_at, by="a").next_fire_at == run_at


def test_an_update_never_brings_back_a_one_shot_that_ran() -> None:
    """If a one-shot job fired and is updated with the same time, then it has no next
    fire; updated to a later time that has passed, it is due again at that time."""
    job = Job.schedule(once(AT), at=AT - timedelta(hours=1), by="a")
    job.fire(scheduled_for=AT, leader_epoch=1, at=AT)
    job.update(once(AT), at=AT + timedelta(hours=1), by="a")
    assert job.next_fire_at is None
    later = AT + timedelta(minutes=30)
    job.update(once(later), at=AT + timedelta(hours=1), by="a")
    assert job.next_fire_at == later
    job.update(once(AT - timedelta(minutes=1)), at=AT + timedelta(hours=1), by="a")
    assert job.next_fire_at is None


def test_manual_jobs_run_only_when_triggered() -> None:
    """If a job has a manual schedule, then it never fires by itself but can be triggered."""
    definition = JobDefinition(
        name="manual", spec=ExecutionSpec(handler="test.echo"), schedule=ManualSchedule()
    )
    job = Job.schedule(definition, at=AT, by="a", key="manual-job")
    assert job.id == job_id_for_key("manual-job")
    assert job.next_fire_at is None
    execution = job.trigger(trigger_key="run-1", at=AT, by="op")
    assert execution.trigger is Trigger.MANUAL
    assert execution.trigger_key == "run-1"
    assert job.trigger(trigger_key="run-1", at=AT, by="op").id == execution.id


def test_update_recomputes_the_next_fire_in_the_new_zone() -> None:
    """If the zone of a cron changes, then next_fire_at follows the new zone."""
    job = Job.schedule(hourly(), at=AT, by="a")
    daily_berlin = JobDefinition(
        name="daily",
        spec=ExecutionSpec(handler="test.echo"),
        schedule=CronSchedule("0 9 * * *", "Europe/Berlin"),
    )
    job.update(daily_berlin, at=AT, by="b")
    assert job.next_fire_at == datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def test_an_update_or_resume_never_plans_an_occurrence_already_fired() -> None:
    """If an update or a resume is stamped earlier than the job's last fired occurrence
    (a clock behind the leader's), then the next fire still lies after that occurrence,
    so no occurrence is fired twice."""
    job = Job.schedule(hourly(), at=AT, by="a")
    fired_at = AT + timedelta(hours=1)
    job.fire(scheduled_for=fired_at, leader_epoch=1, at=fired_at)
    job.update(hourly(), at=AT + timedelta(minutes=10), by="a")
    assert job.next_fire_at == fired_at + timedelta(hours=1)
    job.pause(by="a")
    job.resume(at=AT + timedelta(minutes=20), by="a")
    assert job.next_fire_at == fired_at + timedelta(hours=1)
