"""Interval schedules, jitter, windows and exclusions: tables of zone-aware instants,
and properties that the preview is exactly what the scheduler fires."""

import itertools
import uuid
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.calendars import check_calendar, holiday_dates
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.firing import carry_out, plan_due
from jobledger.domain.job import Job, MissReason
from jobledger.domain.policies import MisfirePolicy
from jobledger.domain.schedules import (
    CronSchedule,
    IntervalSchedule,
    Schedule,
    fires_between,
    is_excluded,
    jitter_of,
    next_fire_after,
    run_time,
    upcoming_occurrences,
    validate_schedule,
)

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
T0 = datetime(2026, 10, 30, 0, 0, tzinfo=UTC)
PROPERTIES = settings(max_examples=120, deadline=None)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def local_day(zone: ZoneInfo, day: date) -> tuple[datetime, datetime]:
    """(a hair before the local midnight, the last instant of that local day)."""
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    end = start + timedelta(days=1)
    return start - timedelta(microseconds=1), end - timedelta(microseconds=1)


# --- interval schedules: tables ---------------------------------------------------------


def test_interval_fires_at_the_epoch_multiples_plus_the_offset() -> None:
    """If an interval is every 45 minutes offset by 5, then it fires at 00:05, 00:50,
    01:35... counted from 1970-01-01T00:00Z, which cron cannot say."""
    schedule = IntervalSchedule(every_seconds=2700, offset_seconds=300)
    fires = fires_between(schedule, utc(2026, 1, 1), utc(2026, 1, 1, 3), limit=10)
    # 2026-01-01T00:00Z is 20454 days after the epoch: a multiple of 45 minutes.
    assert fires == [
        utc(2026, 1, 1, 0, 5),
        utc(2026, 1, 1, 0, 50),
        utc(2026, 1, 1, 1, 35),
        utc(2026, 1, 1, 2, 20),
    ]


@pytest.mark.parametrize(
    ("zone", "day", "every", "count"),
    [
        # New York: 2026-03-08 has 23 hours, 2026-11-01 has 25, a plain day 24.
        (NEW_YORK, date(2026, 3, 8), 3600, 23),
        (NEW_YORK, date(2026, 11, 1), 3600, 25),
        (NEW_YORK, date(2026, 6, 1), 3600, 24),
        # Berlin: 2026-03-29 and 2026-10-25.
        (BERLIN, date(2026, 3, 29), 1800, 46),
        (BERLIN, date(2026, 10, 25), 1800, 50),
    ],
)
def test_interval_counts_elapsed_time_through_daylight_saving(
    zone: ZoneInfo, day: date, every: int, count: int
) -> None:
    """If an interval schedule is in a zone, then DST changes none of its fires: a local
    day of 23 or 25 hours has 23 or 25 hourly fires."""
    schedule = IntervalSchedule(every_seconds=every, timezone=zone.key)
    after, until = local_day(zone, day)
    fires = fires_between(schedule, after, until, limit=100)
    assert len(fires) == count
    assert all(b - a == timedelta(seconds=every) for a, b in itertools.pairwise(fires))


@pytest.mark.parametrize(
    ("instant", "local"),
    [
        # Every 24 h at 05:00Z: midnight EST in winter, 01:00 EDT in summer.
        (utc(2026, 3, 7, 5), "2026-03-07T00:00:00-05:00"),
        (utc(2026, 3, 8, 5), "2026-03-08T00:00:00-05:00"),
        (utc(2026, 3, 9, 5), "2026-03-09T01:00:00-04:00"),
        (utc(2026, 10, 31, 5), "2026-10-31T01:00:00-04:00"),
        (utc(2026, 11, 1, 5), "2026-11-01T01:00:00-04:00"),
        (utc(2026, 11, 2, 5), "2026-11-02T00:00:00-05:00"),
    ],
)
def test_a_daily_interval_keeps_its_instant_and_moves_in_local_time(
    instant: datetime, local: str
) -> None:
    """If an interval is 24 hours in New York, then each fire is 24 real hours after the
    one before, so its local wall time moves by an hour at each change (unlike a cron)."""
    schedule = IntervalSchedule(
        every_seconds=86400, offset_seconds=5 * 3600, timezone="America/New_York"
    )
    fire = next_fire_after(schedule, instant - timedelta(seconds=1))
    assert fire == instant
    assert fire.astimezone(NEW_YORK).isoformat() == local


@pytest.mark.parametrize(
    ("zone", "occurrence", "excluded"),
    [
        # 2026-11-01T03:30Z is still 2026-10-31 in New York (EDT), but 11-01 in Berlin.
        (NEW_YORK, utc(2026, 11, 1, 3, 30), False),
        (BERLIN, utc(2026, 11, 1, 3, 30), True),
        # 05:30Z on the day of the change is 01:30 EDT, the first pass: 11-01 locally.
        (NEW_YORK, utc(2026, 11, 1, 5, 30), True),
        (NEW_YORK, utc(2026, 11, 2, 4, 59), True),  # 23:59 EST, still 11-01
        (NEW_YORK, utc(2026, 11, 2, 5, 0), False),
    ],
)
def test_exclusion_dates_are_local_dates_in_the_schedules_zone(
    zone: ZoneInfo, occurrence: datetime, excluded: bool
) -> None:
    """If a date is excluded, then an occurrence is excluded by its local date in the
    schedule's zone, DST included, not by its UTC date."""
    schedule = IntervalSchedule(
        every_seconds=60, timezone=zone.key, exclude_dates=(date(2026, 11, 1),)
    )
    assert is_excluded(schedule, occurrence) is excluded


def test_a_holiday_calendar_excludes_its_holidays() -> None:
    """If a schedule names the US calendar, then Thanksgiving 2026 (Nov 26) and New
    Year's Day are excluded, and the day after Thanksgiving is not."""
    schedule = CronSchedule("0 9 * * *", "America/New_York", calendars=("US",))
    assert date(2026, 11, 26) in holiday_dates("US", 2026)
    assert is_excluded(schedule, utc(2026, 11, 26, 14))
    assert is_excluded(schedule, utc(2027, 1, 1, 14))
    assert not is_excluded(schedule, utc(2026, 11, 27, 14))


def test_a_subdivision_calendar_has_its_own_holidays() -> None:
    """If the calendar is Bavaria's, then Epiphany (Jan 6) is a holiday, and not in
    Berlin's calendar."""
    assert date(2026, 1, 6) in holiday_dates("DE-BY", 2026)
    assert date(2026, 1, 6) not in holiday_dates("DE-BE", 2026)


# --- windows ---------------------------------------------------------------------------


def test_a_window_bounds_the_occurrences_both_ends_inclusive() -> None:
    """If a schedule has start_at and end_at, then it has occurrences only within
    [start_at, end_at], both ends included, and none after end_at."""
    schedule = CronSchedule("0 * * * *", start_at=utc(2026, 5, 1, 10), end_at=utc(2026, 5, 1, 13))
    assert fires_between(schedule, utc(2026, 5, 1), utc(2026, 5, 2), limit=50) == [
        utc(2026, 5, 1, hour) for hour in (10, 11, 12, 13)
    ]
    assert next_fire_after(schedule, utc(2026, 4, 1)) == utc(2026, 5, 1, 10)
    assert next_fire_after(schedule, utc(2026, 5, 1, 13)) is None


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (IntervalSchedule(every_seconds=30), "schedule.every_seconds"),
        (IntervalSchedule(every_seconds=3600, offset_seconds=3600), "schedule.offset_seconds"),
        (IntervalSchedule(every_seconds=3600, timezone="Mars/Base"), "schedule.timezone"),
        (CronSchedule("0 * * * *", jitter_seconds=-1), "schedule.jitter_seconds"),
        (CronSchedule("0 * * * *", jitter_seconds=90_000), "schedule.jitter_seconds"),
        (
            CronSchedule("0 * * * *", start_at=utc(2026, 2, 1), end_at=utc(2026, 1, 1)),
            "schedule.end_at",
        ),
        (CronSchedule("0 * * * *", calendars=("XX",)), "schedule.calendars"),
        (CronSchedule("0 * * * *", calendars=("DE-ZZ",)), "schedule.calendars"),
        (CronSchedule("0 * * * *", calendars=("us",)), "schedule.calendars"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(schedule: Schedule, field: str) -> None:
    """If a rule is out of range, then validation names its field and a fix."""
    with pytest.raises(InvalidDefinitionError) as refused:
        validate_schedule(schedule)
    assert refused.value.field == field
    assert refused.value.fix


def test_a_calendar_error_lists_the_subdivisions() -> None:
    """If a subdivision is unknown, then the error lists some that exist."""
    with pytest.raises(InvalidDefinitionError, match="BY"):
        check_calendar("DE-XX")


def test_new_schedule_kinds_round_trip_as_the_tagged_union() -> None:
    """If an interval schedule with every rule is encoded, then it decodes equal."""
    schedule = IntervalSchedule(
        every_seconds=2700,
        offset_seconds=300,
        timezone="Europe/Berlin",
        jitter_seconds=30,
        start_at=utc(2026, 1, 1),
        end_at=utc(2027, 1, 1),
        exclude_dates=(date(2026, 12, 24),),
        calendars=("DE-BY",),
    )
    encoded = msgspec.json.encode(schedule)
    assert msgspec.json.decode(encoded, type=Schedule) == schedule
    # A cron stored before the rules existed still decodes, with their defaults.
    old = b'{"type":"cron","expression":"0 3 * * *","timezone":"UTC"}'
    assert msgspec.json.decode(old, type=Schedule) == CronSchedule("0 3 * * *")


# --- jitter ----------------------------------------------------------------------------


@given(
    job_id=st.uuids(),
    occurrence=st.datetimes(
        min_value=datetime(2000, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
        max_value=datetime(2100, 1, 1),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    bound=st.integers(min_value=1, max_value=86400),
)
@PROPERTIES
def test_jitter_stays_within_its_bound_and_is_stable(
    job_id: uuid.UUID, occurrence: datetime, bound: int
) -> None:
    """If a schedule has jitter, then each occurrence's delay is in [0, bound), the same
    every time it is computed, and the run time is the occurrence plus it."""
    schedule = IntervalSchedule(every_seconds=3600, jitter_seconds=bound)
    delay = jitter_of(schedule, job_id, occurrence)
    assert timedelta(0) <= delay < timedelta(seconds=bound)
    assert jitter_of(schedule, job_id, occurrence) == delay
    assert jitter_of(schedule, job_id, occurrence.astimezone(NEW_YORK)) == delay
    assert run_time(schedule, job_id, occurrence) == occurrence + delay


def test_jitter_spreads_occurrences_and_differs_between_jobs() -> None:
    """If many occurrences are jittered, then their delays spread over the bound (not
    all equal), and two jobs get different delays for the same occurrence."""
    schedule = IntervalSchedule(every_seconds=60, jitter_seconds=60)
    first, second = uuid.uuid4(), uuid.uuid4()
    fires = fires_between(schedule, T0, T0 + timedelta(hours=2), limit=200)
    delays = [jitter_of(schedule, first, fire).total_seconds() for fire in fires]
    assert min(delays) < 15
    assert max(delays) > 45
    others = [jitter_of(schedule, second, fire).total_seconds() for fire in fires]
    assert delays != others
    # No job (a preview before it is saved): no jitter to show.
    assert jitter_of(schedule, None, fires[0]) == timedelta(0)


# --- the preview is what the scheduler fires ---------------------------------------------


@st.composite
def recurring(draw: st.DrawFn) -> Schedule:
    zone = draw(st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata"]))
    jitter = draw(st.sampled_from([0, 0, 45, 600]))
    start = T0 + timedelta(minutes=draw(st.integers(0, 300)))
    end = start + timedelta(hours=draw(st.integers(1, 72))) if draw(st.booleans()) else None
    excluded = tuple(
        sorted(set(draw(st.lists(st.dates(date(2026, 10, 30), date(2026, 11, 2)), max_size=2))))
    )
    calendars = draw(st.sampled_from([(), (), ("US",), ("DE-BY",)]))
    start_at = start if draw(st.booleans()) else None
    if draw(st.booleans()):
        every = draw(st.sampled_from([600, 2700, 3600, 5400, 86400]))
        return IntervalSchedule(
            every_seconds=every,
            offset_seconds=draw(st.integers(0, every - 1)),
            timezone=zone,
            jitter_seconds=jitter,
            start_at=start_at,
            end_at=end,
            exclude_dates=excluded,
            calendars=calendars,
        )
    expression = draw(st.sampled_from(["*/30 * * * *", "0 * * * *", "30 1 * * *", "15 2 * * 0-4"]))
    return CronSchedule(
        expression,
        zone,
        jitter_seconds=jitter,
        start_at=start_at,
        end_at=end,
        exclude_dates=excluded,
        calendars=calendars,
    )


def _tick_through(
    job: Job, ticks: list[datetime]
) -> tuple[list[tuple[datetime, datetime]], list[datetime]]:
    """Run the scheduler's pure rules at each tick; (occurrence, ready_at) of each fire,
    and every occurrence recorded missed as excluded."""
    fired: list[tuple[datetime, datetime]] = []
    excluded: list[datetime] = []
    for now in ticks:
        steps = plan_due(job, now, grace=timedelta(days=3650))
        executions = carry_out(job, steps, leader_epoch=1, at=now)
        fired += [(e.scheduled_for, e.ready_at) for e in executions if e.scheduled_for]
        for recorded in job.collect_events():
            if isinstance(recorded, Job.FiresMissed) and recorded.reason is MissReason.EXCLUDED:
                schedule = job.definition.schedule
                after = recorded.first - timedelta(microseconds=1)
                excluded += fires_between(schedule, after, recorded.last, limit=recorded.count)
    return fired, excluded


@given(schedule=recurring(), gaps=st.lists(st.integers(1, 7200), min_size=10, max_size=40))
@PROPERTIES
def test_the_preview_is_exactly_what_the_scheduler_fires(
    schedule: Schedule, gaps: list[int]
) -> None:
    """If a job's schedule has an interval or cron with any window, jitter and
    exclusions, then ticking the scheduler through time fires exactly the preview's
    occurrences that are not excluded, each ready at its previewed run time (or at the
    tick, if that came later), and records exactly the excluded ones as missed."""
    definition = JobDefinition(
        name="rules",
        spec=ExecutionSpec(handler="test.echo"),
        schedule=schedule,
        misfire=MisfirePolicy.FIRE_ALL,
        catch_up_cap=1000,
    )
    job = Job.schedule(definition, at=T0, by="t")
    job.collect_events()
    ticks, now = [], T0
    for gap in gaps:
        now += timedelta(seconds=gap)
        ticks.append(now)
    preview = upcoming_occurrences(schedule, T0, horizon=now - T0, limit=1000, job_id=job.id)
    fired, excluded = _tick_through(job, ticks)
    assert [o.scheduled_for for o in preview if not o.excluded] == [f for f, _ in fired]
    assert [o.scheduled_for for o in preview if o.excluded] == excluded
    ticks_at = {}
    for occurrence, _ in fired:
        ticks_at[occurrence] = next(t for t in ticks if t >= occurrence)
    run_at = {o.scheduled_for: o.run_at for o in preview}
    assert all(ready == max(run_at[f], ticks_at[f]) for f, ready in fired)
