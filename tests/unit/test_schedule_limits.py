"""Schedule input at the edges: region zones only, cron steps within their field, and
instants and fires that stay inside the calendar."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.api.dashboard.presenters import timezones
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.instants import check_instant
from jobledger.domain.schedules import (
    EARLIEST_INSTANT,
    LATEST_INSTANT,
    CronSchedule,
    OneShotSchedule,
    next_fire_after,
    region_zones,
    upcoming_fires,
    validate_schedule,
)

PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))
LATE = datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_14)
EARLY = datetime(1, 1, 1, tzinfo=PLUS_14)
CENTURY = timedelta(days=366 * 100)


@pytest.mark.parametrize(
    "zone", ["localtime", "Factory", "posixrules", "US/Eastern", "GMT", "Japan", "right/UTC"]
)
def test_zones_that_are_not_region_names_are_refused(zone: str) -> None:
    """If a cron names a zone that is not an IANA region name, then it is refused on
    schedule.timezone with a fix naming a region."""
    with pytest.raises(InvalidDefinitionError) as caught:
        validate_schedule(CronSchedule("0 * * * *", zone))
    assert caught.value.field == "schedule.timezone"
    assert "Europe/Berlin" in caught.value.fix


@pytest.mark.parametrize(
    "zone", ["UTC", "Etc/UTC", "Etc/GMT+5", "Europe/Berlin", "America/Argentina/Buenos_Aires"]
)
def test_region_names_utc_and_etc_zones_are_valid(zone: str) -> None:
    """If a cron names UTC, an Etc zone or an Area/Location zone, then it is valid."""
    validate_schedule(CronSchedule("0 * * * *", zone))
    assert zone in region_zones()


def test_a_saved_job_with_a_legacy_zone_still_fires() -> None:
    """If a job saved before the rule names a legacy zone, then its fires are still
    computed: the rule applies to new definitions, not to the log."""
    fire = next_fire_after(
        CronSchedule("0 12 * * *", "US/Eastern"), datetime(2026, 7, 1, tzinfo=UTC)
    )
    assert fire == datetime(2026, 7, 1, 16, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "field_name"),
    [
        ("*/0 * * * *", "minute"),
        ("*/60 * * * *", "minute"),
        ("*/1000000 * * * *", "minute"),
        ("*/99999999999999999999999 * * * *", "minute"),
        ("1-50/100 * * * *", "minute"),
        ("0 */24 * * *", "hour"),
        ("0 0 */31 * *", "day-of-month"),
        ("0 0 1 */12 *", "month"),
        ("0 0 * * */7", "day-of-week"),
        ("0,5/0 * * * *", "minute"),
    ],
)
def test_absurd_cron_steps_are_refused_with_the_fields_range(
    expression: str, field_name: str
) -> None:
    """If a cron step is 0 or larger than its field's span, then it is refused naming
    the field and the steps it takes."""
    with pytest.raises(InvalidDefinitionError) as caught:
        validate_schedule(CronSchedule(expression))
    assert caught.value.field == "schedule.expression"
    assert f"in the {field_name} field" in caught.value.problem
    assert caught.value.fix.startswith("use a step from 1 to")


@pytest.mark.parametrize(
    "expression",
    [
        "*/59 * * * *",
        "0 */23 * * *",
        "0 0 */30 * *",
        "0 0 1 */11 *",
        "0 0 * * */6",
        "0 9 * * 1-5/2",
    ],
)
def test_steps_within_the_field_are_valid(expression: str) -> None:
    """If every step lies from 1 to its field's span, then the cron is valid."""
    validate_schedule(CronSchedule(expression))


@pytest.mark.parametrize(("value", "words"), [(LATE, "outside"), (EARLY, "outside")])
def test_instants_past_the_calendar_are_refused_naming_the_field(
    value: datetime, words: str
) -> None:
    """If a one-shot's run_at converts to UTC outside the supported range (or not at
    all), then it is refused on schedule.run_at instead of overflowing."""
    with pytest.raises(InvalidDefinitionError, match=words) as caught:
        validate_schedule(OneShotSchedule(value))
    assert caught.value.field == "schedule.run_at"
    with pytest.raises(InvalidDefinitionError, match="no time zone"):
        check_instant("after", datetime(2026, 1, 1))  # noqa: DTZ001 (the point of the test)


def test_the_ends_of_the_range_are_valid() -> None:
    """If an instant is exactly at either end of the range, then it is accepted as UTC."""
    assert check_instant("run_at", EARLIEST_INSTANT.astimezone(PLUS_14)) == EARLIEST_INSTANT
    assert check_instant("run_at", LATEST_INSTANT.astimezone(MINUS_14)) == LATEST_INSTANT


ZONES = st.sampled_from(["UTC", "Pacific/Kiritimati", "Etc/GMT+12", "America/New_York"])
EXPRESSIONS = st.sampled_from(["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 29 2 *"])
OFFSETS = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))


@settings(max_examples=200, deadline=None)
@given(
    expression=EXPRESSIONS,
    zone=ZONES,
    after=st.one_of(
        st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(1, 1, 10)),  # noqa: DTZ001 (naive bounds; the offset is drawn apart)
        st.datetimes(min_value=datetime(9999, 11, 20), max_value=datetime(9999, 12, 31)),  # noqa: DTZ001 (as above)
    ),
    offset=OFFSETS,
)
def test_fires_near_the_ends_of_the_calendar_never_overflow(
    expression: str, zone: str, after: datetime, offset: timezone
) -> None:
    """If fires are asked for near year 1 or year 9999 in any zone and from any offset,
    then they come back ascending and inside the range, or there are none: never an
    OverflowError."""
    try:
        start = after.replace(tzinfo=offset)
        start.astimezone(UTC)
    except OverflowError:
        return  # no such instant: check_instant refuses it before any evaluation
    schedule = CronSchedule(expression, zone)
    fires = upcoming_fires(schedule, start, horizon=CENTURY, limit=5)
    assert fires == sorted(set(fires))
    assert all(EARLIEST_INSTANT <= fire <= LATEST_INSTANT for fire in fires)
    following = next_fire_after(schedule, start)
    assert following == (fires[0] if fires else None)


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        (CronSchedule("0 * * * *" + " " * 200), "schedule.expression"),
        (CronSchedule("0 *\x00 * * *"), "schedule.expression"),
        (CronSchedule("0 * * * *", "Europe/" + "x" * 60), "schedule.timezone"),
    ],
)
def test_cron_texts_past_their_length_or_with_nul_are_refused(
    schedule: CronSchedule, field: str
) -> None:
    """If a Python caller passes a cron or zone too long for the API's fields, or holding
    NUL, then it is refused on that field like any other bad input."""
    with pytest.raises(InvalidDefinitionError) as caught:
        validate_schedule(schedule)
    assert caught.value.field == field


def test_the_dashboard_offers_only_zones_the_domain_accepts() -> None:
    """If the job form lists time zones, then it lists exactly the region names."""
    offered = timezones()
    assert set(offered) == region_zones()
    assert "Europe/Berlin" in offered
    assert not {"localtime", "Factory", "posixrules"} & set(offered)
