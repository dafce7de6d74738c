"""Firing a due job: catch-up after downtime and overlap, as pure rules."""

from datetime import UTC, datetime, timedelta

import pytest

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.firing import Fire, Miss, OpenRuns, carry_out, plan_due
from jobledger.domain.job import Job, MissReason
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.schedules import CronSchedule

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def every_minute(
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE,
    overlap: OverlapPolicy = OverlapPolicy.ALLOW,
    cap: int = 3,
) -> Job:
    definition = JobDefinition(
        name="minutely",
        spec=ExecutionSpec(handler="test.echo"),
        schedule=CronSchedule("*/1 * * * *"),
        misfire=misfire,
        catch_up_cap=cap,
        overlap=overlap,
    )
    return Job.schedule(definition, at=T0 - timedelta(seconds=30), by="t")


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


@pytest.mark.parametrize(
    ("policy", "fired", "missed"),
    [
        # Down from 12:00 to 12:10:30: 12:00..12:09 are late (grace 60 s), 12:10 is on time.
        (MisfirePolicy.SKIP, minutes(10), minutes(*range(10))),
        (MisfirePolicy.FIRE_ONCE, minutes(9, 10), minutes(*range(9))),
        (MisfirePolicy.FIRE_ALL, minutes(0, 1, 2, 10), minutes(*range(3, 10))),
    ],
)
def test_ten_minutes_of_downtime_follow_the_misfire_policy(
    policy: MisfirePolicy, fired: list[datetime], missed: list[datetime]
) -> None:
    """If a */1 job's scheduler was down 10 minutes, then exactly the policy's occurrences
    fire and the rest are recorded as missed, in order."""
    job = every_minute(misfire=policy)
    now = T0 + timedelta(minutes=10, seconds=30)
    steps = plan_due(job, now)
    executions = carry_out(job, steps, leader_epoch=1, at=now)
    assert [e.scheduled_for for e in executions] == fired
    misses = [s for s in steps if isinstance(s, Miss)]
    recorded = [
        T0 + timedelta(minutes=m)
        for miss in misses
        for m in range(
            int((miss.missed.first - T0).total_seconds() // 60),
            int((miss.missed.last - T0).total_seconds() // 60) + 1,
        )
    ]
    assert recorded == missed
    assert sum(m.missed.count for m in misses) == len(missed)
    assert all(m.reason is MissReason.DOWNTIME for m in misses)
    assert job.next_fire_at == T0 + timedelta(minutes=11)
    assert all(e.ready_at >= e.scheduled_for for e in executions if e.scheduled_for)


def test_nothing_fires_before_its_time() -> None:
    """If the scheduler looks a moment before an occurrence, then nothing fires."""
    job = every_minute()
    assert plan_due(job, T0 - timedelta(milliseconds=1)) == []
    assert plan_due(job, T0) == [Fire(T0)]


@pytest.mark.parametrize(
    ("policy", "open_runs", "fires"),
    [
        (OverlapPolicy.ALLOW, OpenRuns(pending=3, running=1), True),
        (OverlapPolicy.SKIP_IF_RUNNING, OpenRuns(running=1), False),
        (OverlapPolicy.SKIP_IF_RUNNING, OpenRuns(), True),
        (OverlapPolicy.QUEUE_ONE, OpenRuns(running=1), True),
        (OverlapPolicy.QUEUE_ONE, OpenRuns(pending=1, running=1), False),
    ],
)
def test_overlap_policy(policy: OverlapPolicy, open_runs: OpenRuns, fires: bool) -> None:
    """If an earlier run is open, then the overlap policy decides whether the next fires."""
    job = every_minute(overlap=policy)
    steps = plan_due(job, T0 + timedelta(seconds=1), open_runs=open_runs)
    assert isinstance(steps[0], Fire) is fires
    if not fires:
        miss = steps[0]
        assert isinstance(miss, Miss)
        assert miss.reason is MissReason.OVERLAP
        assert miss.policy is policy


def test_paused_jobs_have_nothing_due() -> None:
    """If a job is paused, then nothing is due, however late it is."""
    job = every_minute()
    job.pause(by="op")
    assert plan_due(job, T0 + timedelta(hours=5)) == []
