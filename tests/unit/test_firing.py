"""Firing a due job: catch-up after downtime and overlap, as pure rules."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.definitions import TURN_KEY_PREFIX, ExecutionSpec, JobDefinition
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.firing import (
    Fire,
    Miss,
    OpenRuns,
    carry_out,
    due_occurrences,
    plan_due,
    superseded,
)
from jobledger.domain.job import Job, MissReason
from jobledger.domain.limits import ConcurrencyLimit, RunLimits
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.schedules import CronSchedule

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def cron_job(
    schedule: CronSchedule,
    start: datetime,
    misfire: MisfirePolicy,
    overlap: OverlapPolicy,
    cap: int,
) -> Job:
    """A job with ``schedule`` saved half a minute before ``start``."""
    definition = JobDefinition(
        name="cron",
        spec=ExecutionSpec(handler="test.echo"),
        schedule=schedule,
        misfire=misfire,
        catch_up_cap=cap,
        overlap=overlap,
    )
    return Job.schedule(definition, at=start - timedelta(seconds=30), by="t")


def every_minute(
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE,
    overlap: OverlapPolicy = OverlapPolicy.ALLOW,
    cap: int = 3,
) -> Job:
    return cron_job(CronSchedule("*/1 * * * *"), T0, misfire, overlap, cap)


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
        (OverlapPolicy.BUFFER_ALL, OpenRuns(pending=3, running=1), True),
        (OverlapPolicy.CANCEL_OTHER, OpenRuns(pending=1, running=1), True),
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


@given(behind=st.integers(0, 8), running=st.integers(0, 3))
def test_cancel_other_fires_the_last_and_cancels_every_open_run(behind: int, running: int) -> None:
    """If a cancel_other job is due ``behind`` minutes late with runs open, then only its
    last due occurrence fires (the others are recorded missed for overlap, as each
    would cancel the one before at once), and every open run is to be cancelled."""
    job = every_minute(MisfirePolicy.FIRE_ALL, OverlapPolicy.CANCEL_OTHER, cap=10)
    ids = tuple(uuid.uuid4() for _ in range(running))
    open_runs = OpenRuns(running=running, ids=ids)
    now = T0 + timedelta(minutes=behind, seconds=1)
    steps = plan_due(job, now, open_runs=open_runs)
    fires = [step for step in steps if isinstance(step, Fire)]
    assert fires == [Fire(T0 + timedelta(minutes=behind))]
    missed = sum(step.missed.count for step in steps if isinstance(step, Miss))
    assert missed == behind
    assert all(
        (step.reason, step.policy) == (MissReason.OVERLAP, OverlapPolicy.CANCEL_OTHER)
        for step in steps
        if isinstance(step, Miss)
    )
    assert superseded(job, steps, open_runs) == ids
    assert superseded(every_minute(), plan_due(every_minute(), now), open_runs) == ()


def test_buffer_all_runs_take_turns_through_one_limit() -> None:
    """If a buffer_all job fires twice and is triggered, then all three runs share a
    concurrency limit of one under the job's own key; a buffer_all job that names a concurrency
    limit of its own is refused naming it."""
    job = every_minute(overlap=OverlapPolicy.BUFFER_ALL)
    steps = plan_due(job, T0 + timedelta(minutes=1, seconds=1), open_runs=OpenRuns(running=1))
    runs = carry_out(job, steps, leader_epoch=1, at=T0)
    assert len(runs) == 2
    runs.append(job.trigger(trigger_key="by-hand", at=T0, by="t"))
    for run in runs:
        assert run.spec.limits == RunLimits(
            concurrency=ConcurrencyLimit(key=f"{TURN_KEY_PREFIX}{job.id}", max=1)
        )
    spec = ExecutionSpec(
        handler="test.echo", limits=RunLimits(concurrency=ConcurrencyLimit(key="k", max=2))
    )
    definition = JobDefinition(name="b", spec=spec, overlap=OverlapPolicy.BUFFER_ALL)
    with pytest.raises(InvalidDefinitionError, match=r"limits\.concurrency"):
        definition.check()


def test_paused_jobs_have_nothing_due() -> None:
    """If a job is paused, then nothing is due, however late it is."""
    job = every_minute()
    job.pause(by="op")
    assert plan_due(job, T0 + timedelta(hours=5)) == []


# ---- catch-up fires go through the overlap policy ------------------------------------

BERLIN = ZoneInfo("Europe/Berlin")
# A */2 Berlin job back after downtime: it was due at 14:00..14:08 local (12:00..12:08
# UTC, summer time); the scheduler looks at 14:08:30, so 14:00..14:06 are late.
B0 = datetime(2026, 6, 1, 14, 0, tzinfo=BERLIN)
BACK_AT = B0 + timedelta(minutes=8, seconds=30)


def every_two_minutes_in_berlin(
    misfire: MisfirePolicy, overlap: OverlapPolicy, cap: int = 3
) -> Job:
    return cron_job(CronSchedule("*/2 * * * *", "Europe/Berlin"), B0, misfire, overlap, cap)


def berlin(*offsets: int) -> list[datetime]:
    return [B0 + timedelta(minutes=m) for m in offsets]


def fired_and_missed(steps: list[Fire | Miss]) -> tuple[list[datetime], list[tuple[Any, ...]]]:
    fired = [s.scheduled_for for s in steps if isinstance(s, Fire)]
    missed = [
        (s.reason, s.missed.first, s.missed.last, s.missed.count)
        for s in steps
        if isinstance(s, Miss)
    ]
    return fired, missed


DOWN, OVER = MissReason.DOWNTIME, MissReason.OVERLAP
SKIP_IF, QUEUE_ONE, ALLOW = (
    OverlapPolicy.SKIP_IF_RUNNING,
    OverlapPolicy.QUEUE_ONE,
    OverlapPolicy.ALLOW,
)
NONE_OPEN, ONE_RUNNING, ONE_PENDING = OpenRuns(), OpenRuns(running=1), OpenRuns(pending=1)


@pytest.mark.parametrize(
    ("misfire", "overlap", "open_runs", "fired", "missed"),
    [
        # The reported case: fire_all with a cap of 3 used to fire 14:00, 14:02, 14:04.
        (
            MisfirePolicy.FIRE_ALL, SKIP_IF, NONE_OPEN, berlin(0),
            [(OVER, *berlin(2, 4), 2), (DOWN, *berlin(6, 6), 1), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.FIRE_ALL, SKIP_IF, ONE_RUNNING, [],
            [(OVER, *berlin(0, 4), 3), (DOWN, *berlin(6, 6), 1), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.FIRE_ALL, QUEUE_ONE, ONE_RUNNING, berlin(0),
            [(OVER, *berlin(2, 4), 2), (DOWN, *berlin(6, 6), 1), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.FIRE_ALL, QUEUE_ONE, ONE_PENDING, [],
            [(OVER, *berlin(0, 4), 3), (DOWN, *berlin(6, 6), 1), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.FIRE_ALL, ALLOW, ONE_RUNNING, berlin(0, 2, 4, 8),
            [(DOWN, *berlin(6, 6), 1)],
        ),
        (
            MisfirePolicy.FIRE_ONCE, SKIP_IF, NONE_OPEN, berlin(6),
            [(DOWN, *berlin(0, 4), 3), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.FIRE_ONCE, SKIP_IF, ONE_RUNNING, [],
            [(DOWN, *berlin(0, 4), 3), (OVER, *berlin(6, 8), 2)],
        ),
        (
            MisfirePolicy.FIRE_ONCE, QUEUE_ONE, ONE_RUNNING, berlin(6),
            [(DOWN, *berlin(0, 4), 3), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.FIRE_ONCE, ALLOW, ONE_PENDING, berlin(6, 8),
            [(DOWN, *berlin(0, 4), 3)],
        ),
        (
            MisfirePolicy.SKIP, SKIP_IF, NONE_OPEN, berlin(8),
            [(DOWN, *berlin(0, 6), 4)],
        ),
        (
            MisfirePolicy.SKIP, SKIP_IF, ONE_RUNNING, [],
            [(DOWN, *berlin(0, 6), 4), (OVER, *berlin(8, 8), 1)],
        ),
        (
            MisfirePolicy.SKIP, QUEUE_ONE, ONE_PENDING, [],
            [(DOWN, *berlin(0, 6), 4), (OVER, *berlin(8, 8), 1)],
        ),
    ],
)  # fmt: skip
def test_late_fires_go_through_the_overlap_policy(
    misfire: MisfirePolicy,
    overlap: OverlapPolicy,
    open_runs: OpenRuns,
    fired: list[datetime],
    missed: list[tuple[Any, ...]],
) -> None:
    """If a job comes back from downtime, then the misfire policy picks the late
    occurrences that may fire and each of those, like an on-time one, fires only if the
    overlap policy admits it (counting the runs fired earlier in the same plan)."""
    job = every_two_minutes_in_berlin(misfire, overlap)
    steps = plan_due(job, BACK_AT, open_runs=open_runs)
    assert fired_and_missed(steps) == (fired, missed)
    executions = carry_out(job, steps, leader_epoch=1, at=BACK_AT)
    assert [e.scheduled_for for e in executions] == fired
    assert job.next_fire_at == B0 + timedelta(minutes=10)


@st.composite
def due_jobs(draw: st.DrawFn) -> tuple[Job, datetime, OpenRuns]:
    job = every_two_minutes_in_berlin(
        draw(st.sampled_from(MisfirePolicy)),
        draw(st.sampled_from(OverlapPolicy)),
        cap=draw(st.integers(min_value=1, max_value=10)),
    )
    now = B0 + timedelta(seconds=draw(st.integers(min_value=0, max_value=3 * 3600)))
    open_runs = OpenRuns(
        pending=draw(st.integers(min_value=0, max_value=3)),
        running=draw(st.integers(min_value=0, max_value=3)),
    )
    return job, now, open_runs


@given(due_jobs(), st.integers(min_value=1, max_value=300))
@settings(max_examples=300, deadline=None)
def test_no_plan_breaks_the_overlap_policy(
    case: tuple[Job, datetime, OpenRuns], grace_seconds: int
) -> None:
    """If any job is planned at any time with any open runs, then a skip_if_running job
    never gets a second open run, a queue_one job never more than one waiting, and every
    due occurrence is fired or recorded as missed exactly once."""
    job, now, open_runs = case
    due = due_occurrences(job, now)
    steps = plan_due(job, now, open_runs=open_runs, grace=timedelta(seconds=grace_seconds))
    fires = sum(isinstance(s, Fire) for s in steps)
    match job.definition.overlap:
        case OverlapPolicy.SKIP_IF_RUNNING:
            assert fires <= (1 if open_runs.pending + open_runs.running == 0 else 0)
        case OverlapPolicy.QUEUE_ONE:
            assert fires <= (1 if open_runs.pending == 0 else 0)
        case OverlapPolicy.ALLOW:
            pass
    covered = fires + sum(s.missed.count for s in steps if isinstance(s, Miss))
    assert covered == len(due)
