"""Schedules: cron evaluation under the written DST policy, validation, and catch-up."""

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest
from croniter import croniter
from hypothesis import event, given, settings
from hypothesis import strategies as st

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.policies import MisfirePolicy
from jobledger.domain.schedules import (
    DEFAULT_MIN_INTERVAL,
    CatchUpPlan,
    CronSchedule,
    ManualSchedule,
    MissedFires,
    OneShotSchedule,
    Schedule,
    fires_between,
    next_fire_after,
    plan_catch_up,
    validate_schedule,
)

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
ZONES = (
    "America/New_York",
    "Europe/Berlin",
    "UTC",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
)
MINUTE = timedelta(minutes=1)
PROPERTIES = settings(max_examples=300, deadline=None)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def local_day(zone: ZoneInfo, year: int, month: int, day: int) -> tuple[datetime, datetime]:
    """The local calendar day as the half-open interval (previous midnight, midnight]."""
    start = datetime(year, month, day, tzinfo=zone)
    end = datetime(year, month, day, tzinfo=zone) + timedelta(days=1)
    return start - MINUTE, end - MINUTE


# --- DST policy: tables ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "expression", "day", "expected"),
    [
        # New York springs forward at 02:00 EST (07:00 UTC) to 03:00 EDT.
        (NEW_YORK, "30 2 * * *", (2026, 3, 8), [utc(2026, 3, 8, 7)]),
        (NEW_YORK, "0,15,30,45 2 * * *", (2026, 3, 8), [utc(2026, 3, 8, 7)]),
        (NEW_YORK, "0 2,3 * * *", (2026, 3, 8), [utc(2026, 3, 8, 7)]),
        # Berlin springs forward at 02:00 CET (01:00 UTC) to 03:00 CEST.
        (BERLIN, "30 2 * * *", (2026, 3, 29), [utc(2026, 3, 29, 1)]),
        (BERLIN, "0 2,3 * * *", (2026, 3, 29), [utc(2026, 3, 29, 1)]),
        # Lord Howe springs forward by half an hour, 02:00 to 02:30 (+10:30 to +11).
        (LORD_HOWE, "15 2 * * *", (2026, 10, 4), [utc(2026, 10, 3, 15, 30)]),
    ],
)
def test_skipped_wall_time_fires_once_at_the_jump(
    zone: ZoneInfo, expression: str, day: tuple[int, int, int], expected: list[datetime]
) -> None:
    """If the wall time does not exist that day, then the cron fires once, at the jump."""
    after, until = local_day(zone, *day)
    schedule = CronSchedule(expression, zone.key)
    assert fires_between(schedule, after, until, limit=10) == expected


@pytest.mark.parametrize(
    ("zone", "expression", "day", "expected"),
    [
        # New York falls back at 02:00 EDT (06:00 UTC) to 01:00 EST: 01:xx happens twice.
        (NEW_YORK, "30 1 * * *", (2026, 11, 1), [utc(2026, 11, 1, 5, 30)]),
        # A fixed hour range: 01:00 EDT once, then 02:00 and 03:00 EST.
        (
            NEW_YORK,
            "0 1-3 * * *",
            (2026, 11, 1),
            [utc(2026, 11, 1, 5), utc(2026, 11, 1, 7), utc(2026, 11, 1, 8)],
        ),
        # Berlin falls back at 03:00 CEST (01:00 UTC) to 02:00 CET: 02:xx happens twice.
        (BERLIN, "30 2 * * *", (2026, 10, 25), [utc(2026, 10, 25, 0, 30)]),
        # Lord Howe falls back by half an hour, 02:00 (+11) to 01:30 (+10:30).
        (LORD_HOWE, "45 1 * * *", (2026, 4, 5), [utc(2026, 4, 4, 14, 45)]),
    ],
)
def test_repeated_wall_time_fires_once_at_its_first_occurrence(
    zone: ZoneInfo, expression: str, day: tuple[int, int, int], expected: list[datetime]
) -> None:
    """If a fixed-hour cron's wall time happens twice, then it fires once, the first time."""
    after, until = local_day(zone, *day)
    schedule = CronSchedule(expression, zone.key)
    assert fires_between(schedule, after, until, limit=10) == expected


@pytest.mark.parametrize(
    ("zone", "after", "until", "expected"),
    [
        # New York spring forward: 01:45 EST, then the jump to 03:00 EDT, then on.
        (
            NEW_YORK,
            utc(2026, 3, 8, 6, 30),
            utc(2026, 3, 8, 7, 30),
            [
                utc(2026, 3, 8, 6, 45),
                utc(2026, 3, 8, 7),
                utc(2026, 3, 8, 7, 15),
                utc(2026, 3, 8, 7, 30),
            ],
        ),
        # New York fall back: 01:00-01:45 EDT, again 01:00-01:45 EST, then 02:00 EST.
        (
            NEW_YORK,
            utc(2026, 11, 1, 4, 30),
            utc(2026, 11, 1, 7, 30),
            [
                utc(2026, 11, 1, 4, 45),
                utc(2026, 11, 1, 5),
                utc(2026, 11, 1, 5, 15),
                utc(2026, 11, 1, 5, 30),
                utc(2026, 11, 1, 5, 45),
                utc(2026, 11, 1, 6),
                utc(2026, 11, 1, 6, 15),
                utc(2026, 11, 1, 6, 30),
                utc(2026, 11, 1, 6, 45),
                utc(2026, 11, 1, 7),
                utc(2026, 11, 1, 7, 15),
                utc(2026, 11, 1, 7, 30),
            ],
        ),
        # Berlin spring forward: 01:45 CET, then the jump to 03:00 CEST, then on.
        (
            BERLIN,
            utc(2026, 3, 29, 0, 30),
            utc(2026, 3, 29, 1, 30),
            [
                utc(2026, 3, 29, 0, 45),
                utc(2026, 3, 29, 1),
                utc(2026, 3, 29, 1, 15),
                utc(2026, 3, 29, 1, 30),
            ],
        ),
        # Lord Howe fall back by half an hour: 01:30 and 01:45 at +11, again at +10:30.
        (
            LORD_HOWE,
            utc(2026, 4, 4, 14),
            utc(2026, 4, 4, 15, 30),
            [
                utc(2026, 4, 4, 14, 15),
                utc(2026, 4, 4, 14, 30),
                utc(2026, 4, 4, 14, 45),
                utc(2026, 4, 4, 15),
                utc(2026, 4, 4, 15, 15),
                utc(2026, 4, 4, 15, 30),
            ],
        ),
        # Berlin fall back: 02:00-02:45 CEST, again 02:00-02:45 CET, then 03:00 CET.
        (
            BERLIN,
            utc(2026, 10, 24, 23, 30),
            utc(2026, 10, 25, 2, 30),
            [
                utc(2026, 10, 24, 23, 45),
                utc(2026, 10, 25, 0),
                utc(2026, 10, 25, 0, 15),
                utc(2026, 10, 25, 0, 30),
                utc(2026, 10, 25, 0, 45),
                utc(2026, 10, 25, 1),
                utc(2026, 10, 25, 1, 15),
                utc(2026, 10, 25, 1, 30),
                utc(2026, 10, 25, 1, 45),
                utc(2026, 10, 25, 2),
                utc(2026, 10, 25, 2, 15),
                utc(2026, 10, 25, 2, 30),
            ],
        ),
    ],
)
def test_quarter_hourly_cron_across_transitions(
    zone: ZoneInfo, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    """If a */15 cron runs across a DST change, then it fires at exactly these instants."""
    schedule = CronSchedule("*/15 * * * *", zone.key)
    assert fires_between(schedule, after, until, limit=100) == expected


@pytest.mark.parametrize(
    ("zone", "after", "until", "expected"),
    [
        # 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST, 03:00 EST.
        (
            NEW_YORK,
            utc(2026, 11, 1, 3, 30),
            utc(2026, 11, 1, 8, 30),
            [
                utc(2026, 11, 1, 4),
                utc(2026, 11, 1, 5),
                utc(2026, 11, 1, 6),
                utc(2026, 11, 1, 7),
                utc(2026, 11, 1, 8),
            ],
        ),
        # 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET, 04:00 CET.
        (
            BERLIN,
            utc(2026, 10, 24, 22, 30),
            utc(2026, 10, 25, 3, 30),
            [
                utc(2026, 10, 24, 23),
                utc(2026, 10, 25, 0),
                utc(2026, 10, 25, 1),
                utc(2026, 10, 25, 2),
                utc(2026, 10, 25, 3),
            ],
        ),
    ],
)
def test_hourly_cron_fires_in_both_passes_of_a_repeated_hour(
    zone: ZoneInfo, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    """If an hourly cron runs through a repeated hour, then it fires every real hour."""
    fires = fires_between(CronSchedule("0 * * * *", zone.key), after, until, limit=100)
    assert fires == expected


@pytest.mark.parametrize(
    ("zone", "expression", "day", "count"),
    [
        (NEW_YORK, "0 * * * *", (2026, 11, 1), 25),
        (NEW_YORK, "@hourly", (2026, 11, 1), 25),
        (NEW_YORK, "0 * * * *", (2026, 3, 8), 23),
        (BERLIN, "0 * * * *", (2026, 10, 25), 25),
        (BERLIN, "0 * * * *", (2026, 3, 29), 23),
        # Lord Howe repeats 01:30-01:59 and skips 02:00-02:29: a half-hour shift.
        (LORD_HOWE, "30 * * * *", (2026, 4, 5), 25),
        (LORD_HOWE, "0 * * * *", (2026, 4, 5), 24),
        (LORD_HOWE, "0 * * * *", (2026, 10, 4), 24),
        (NEW_YORK, "*/15 * * * *", (2026, 11, 1), 100),
        (NEW_YORK, "0 1-3 * * *", (2026, 11, 1), 3),
        (NEW_YORK, "@daily", (2026, 11, 1), 1),
    ],
)
def test_fires_per_local_day_around_transitions(
    zone: ZoneInfo, expression: str, day: tuple[int, int, int], count: int
) -> None:
    """If a cron runs through a DST day, then it fires that many times: every real hour
    for a wildcard hour, once per wall time for a fixed hour."""
    after, until = local_day(zone, *day)
    fires = fires_between(CronSchedule(expression, zone.key), after, until, limit=200)
    assert len(fires) == count
    assert all(earlier < later for earlier, later in itertools.pairwise(fires))


@pytest.mark.parametrize(
    ("zone", "expression", "at", "expected"),
    [
        # Fixed hour, 01:20 EST, the second pass: 01:30 and 01:45 already fired (as EDT).
        (NEW_YORK, "*/15 1,2 * * *", utc(2026, 11, 1, 6, 20), utc(2026, 11, 1, 7)),
        # Fixed hour, 02:20 CET, the second pass: 02:30 and 02:45 already fired (as CEST).
        (BERLIN, "*/15 2,3 * * *", utc(2026, 10, 25, 1, 20), utc(2026, 10, 25, 2)),
        # Wildcard hour, 01:20 EST, the second pass: 01:30 fires again, as EST.
        (NEW_YORK, "*/15 * * * *", utc(2026, 11, 1, 6, 20), utc(2026, 11, 1, 6, 30)),
        # Wildcard hour, 02:20 CET, the second pass: 02:30 fires again, as CET.
        (BERLIN, "*/15 * * * *", utc(2026, 10, 25, 1, 20), utc(2026, 10, 25, 1, 30)),
        # Wildcard hour, 01:50 EDT, the first pass: next is 01:00 EST, a wall time passed.
        (NEW_YORK, "*/30 * * * *", utc(2026, 11, 1, 5, 50), utc(2026, 11, 1, 6)),
        (NEW_YORK, "0 * * * *", utc(2026, 11, 1, 5, 59), utc(2026, 11, 1, 6)),
        # Fixed hour, 01:50 EDT, the first pass: 01:00 and 01:30 do not fire again.
        (NEW_YORK, "*/30 1,2 * * *", utc(2026, 11, 1, 5, 50), utc(2026, 11, 1, 7)),
        # Lord Howe, 01:50 at +11, the first pass: next is 01:30 at +10:30.
        (LORD_HOWE, "*/15 * * * *", utc(2026, 4, 4, 14, 50), utc(2026, 4, 4, 15)),
        # At the last second-pass fire, 01:45 EST: next is 02:00 EST.
        (NEW_YORK, "*/15 * * * *", utc(2026, 11, 1, 6, 45), utc(2026, 11, 1, 7)),
        # At the jump instant itself, 03:00 has collapsed into it: next is 03:15.
        (NEW_YORK, "*/15 * * * *", utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 15)),
        (NEW_YORK, "*/15 2,3 * * *", utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 15)),
        # One microsecond before the jump, the jump is next.
        (
            NEW_YORK,
            "*/15 * * * *",
            utc(2026, 3, 8, 7) - timedelta(microseconds=1),
            utc(2026, 3, 8, 7),
        ),
    ],
)
def test_next_fire_after_around_transitions(
    zone: ZoneInfo, expression: str, at: datetime, expected: datetime
) -> None:
    """If asked from inside or at the edge of a transition, then the next fire follows policy."""
    assert next_fire_after(CronSchedule(expression, zone.key), at) == expected


def test_an_instant_written_as_a_skipped_wall_time_is_read_as_its_instant() -> None:
    """If `at` names a wall time inside a gap, then it is taken as the instant it denotes."""
    # 02:30 with fold=1 reads with the offset after the jump (EDT): 06:30 UTC, 01:30 EST.
    at = datetime(2026, 3, 8, 2, 30, fold=1, tzinfo=NEW_YORK)
    assert next_fire_after(CronSchedule("*/15 * * * *", NEW_YORK.key), at) == utc(2026, 3, 8, 6, 45)


def test_fires_are_returned_in_utc() -> None:
    """If the cron's zone is not UTC and `at` is in a third zone, then the fire is in UTC."""
    at = datetime(2026, 6, 1, 12, tzinfo=ZoneInfo("Asia/Kolkata"))
    fire = next_fire_after(CronSchedule("0 9 * * *", "Europe/Berlin"), at)
    assert fire == utc(2026, 6, 1, 7)
    assert fire is not None
    assert fire.tzinfo is UTC


def test_nicknames_fire_like_their_expansion() -> None:
    """If a nickname is used, then it fires like its 5-field expansion."""
    at = utc(2026, 5, 17, 10, 30)
    pairs = [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@weekly", "0 0 * * 0")]
    pairs += [("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@midnight", "0 0 * * *")]
    for nickname, expansion in pairs:
        assert next_fire_after(CronSchedule(nickname), at) == next_fire_after(
            CronSchedule(expansion), at
        )


def test_fires_between_stops_at_the_limit() -> None:
    """If more fires fall in the interval than the limit, then only the first `limit` return."""
    schedule = CronSchedule("* * * * *")
    fires = fires_between(schedule, utc(2026, 1, 1), utc(2026, 1, 2), limit=3)
    assert fires == [utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3)]
    assert fires_between(schedule, utc(2026, 1, 1), utc(2026, 1, 2), limit=0) == []


@PROPERTIES
@given(
    starts=st.lists(
        st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),  # noqa: DTZ001 (made UTC below)
        min_size=2,
        max_size=8,
    ),
    expression=st.sampled_from(["*/7 * * * *", "5 4 * * 1-5", "0 0 29 2 *", "15,45 */3 * * *"]),
)
def test_a_cron_asked_from_starts_in_any_order_answers_each_from_its_own(
    starts: list[datetime], expression: str
) -> None:
    """If one cron is asked for its next fire from many starts, in any order, then each
    answer is the one a freshly parsed cron gives from that start (UTC has no DST)."""
    schedule = CronSchedule(expression)
    for start in starts:
        expected = croniter(expression, start.replace(second=0, microsecond=0)).get_next(datetime)
        assert next_fire_after(schedule, start.replace(tzinfo=UTC)) == expected.replace(tzinfo=UTC)
        window = fires_between(schedule, start.replace(tzinfo=UTC), utc(2040, 1, 1), limit=2)
        assert window[0] == expected.replace(tzinfo=UTC)


def test_fires_between_is_half_open() -> None:
    """If a fire is exactly at `after` or `until`, then only the one at `until` is included."""
    fires = fires_between(
        CronSchedule("0 * * * *"), utc(2026, 1, 1, 1), utc(2026, 1, 1, 3), limit=9
    )
    assert fires == [utc(2026, 1, 1, 2), utc(2026, 1, 1, 3)]


# --- DST policy: properties --------------------------------------------------------------


class Cron(msgspec.Struct, frozen=True):
    """A generated cron and the minutes and hours it matches, as an independent oracle.

    ``wildcard_hour`` says whether the hour field starts with ``*`` (rule 2b).
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    wildcard_hour: bool = False

    def matches(self, wall: datetime) -> bool:
        return wall.minute in self.minutes and wall.hour in self.hours


@st.composite
def cron_field(draw: st.DrawFn, top: int) -> tuple[str, frozenset[int]]:
    kind = draw(st.sampled_from(["star", "step", "list", "range", "range_step"]))
    if kind == "star":
        return "*", frozenset(range(top + 1))
    if kind == "step":
        step = draw(st.integers(1, top))
        return f"*/{step}", frozenset(range(0, top + 1, step))
    if kind == "list":
        values = draw(st.lists(st.integers(0, top), min_size=1, max_size=4, unique=True))
        return ",".join(map(str, values)), frozenset(values)
    low = draw(st.integers(0, top - 1))
    high = draw(st.integers(low + 1, top))
    if kind == "range":
        return f"{low}-{high}", frozenset(range(low, high + 1))
    step = draw(st.integers(1, top))
    return f"{low}-{high}/{step}", frozenset(range(low, high + 1, step))


@st.composite
def crons(draw: st.DrawFn) -> Cron:
    minute, minutes = draw(cron_field(59))
    hour, hours = draw(cron_field(23))
    return Cron(f"{minute} {hour} * * *", minutes, hours, wildcard_hour=hour.startswith("*"))


instants = st.datetimes(
    min_value=datetime(2025, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
    max_value=datetime(2028, 12, 31),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, NEW_YORK, BERLIN, LORD_HOWE]),
)


def offset_changes(zone: ZoneInfo) -> list[datetime]:
    """The minutes in 2025-2028 at which the zone's UTC offset changes, found by scanning."""
    changes: list[datetime] = []
    day = utc(2025, 1, 1)
    while day.year < 2029:
        following = day + timedelta(days=1)
        if day.astimezone(zone).utcoffset() != following.astimezone(zone).utcoffset():
            minute = day
            while minute.astimezone(zone).utcoffset() == day.astimezone(zone).utcoffset():
                minute += MINUTE
            changes.append(minute)
        day = following
    return changes


OFFSET_CHANGES = {name: offset_changes(ZoneInfo(name)) for name in ZONES}


@st.composite
def zoned_instants(draw: st.DrawFn) -> tuple[ZoneInfo, datetime]:
    """A zone and an instant: uniform in 2025-2028, or near one of the zone's offset changes.

    Near means within a day and a half, or in the two hours just before the change.
    """
    name = draw(st.sampled_from(ZONES))
    changes = OFFSET_CHANGES[name]
    if not changes or draw(st.booleans()):
        return ZoneInfo(name), draw(instants)
    wide, close = timedelta(hours=36), timedelta(hours=2)
    offset = draw(
        st.timedeltas(min_value=-wide, max_value=wide)
        | st.timedeltas(min_value=-close, max_value=timedelta(0))
    )
    return ZoneInfo(name), draw(st.sampled_from(changes)) + offset


def is_jump(instant: datetime, zone: ZoneInfo) -> bool:
    """Whether the zone's UTC offset grows at this instant (the end of a skipped stretch)."""
    before = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = instant.astimezone(zone).utcoffset()
    assert before is not None
    assert after is not None
    return after > before


def oracle_fires_at(instant: datetime, zone: ZoneInfo, cron: Cron) -> bool:
    """The DST policy restated minute by minute on UTC instants.

    An instant that is a first occurrence (fold 0) fires if one of the wall times
    since the previous minute's wall time matches: normally just its own, but right
    after a gap also every wall time the gap skipped. An instant that is a second
    occurrence (fold 1) fires only for a wildcard-hour cron, and only if its own wall
    time matches.
    """
    local = instant.astimezone(zone)
    wall = local.replace(tzinfo=None)
    if local.fold:
        return cron.wildcard_hour and cron.matches(wall)
    candidate = (instant - MINUTE).astimezone(zone).replace(tzinfo=None) + MINUTE
    while candidate <= wall:
        if cron.matches(candidate):
            return True
        candidate += MINUTE
    return False


def oracle_next(cron: Cron, zone: ZoneInfo, at: datetime) -> datetime:
    instant = at.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
    for _ in range(3 * 24 * 60):
        if oracle_fires_at(instant, zone, cron):
            return instant
        instant += MINUTE
    pytest.fail(f"oracle found no fire for {cron.expression} after {at}")


def check_next_fire(cron: Cron, zone: ZoneInfo, at: datetime) -> None:
    schedule = CronSchedule(cron.expression, zone.key)
    fire = next_fire_after(schedule, at)
    assert fire is not None
    assert fire > at
    assert fire.tzinfo is UTC
    local = fire.astimezone(zone)
    assert local.fold == 0 or cron.wildcard_hour
    assert cron.matches(local) or is_jump(fire, zone)
    if local.fold:
        event("fire in the second pass of a repeated stretch")
    else:
        event("fire at a jump instant" if is_jump(fire, zone) else "fire at a matching wall time")
    assert fire == oracle_next(cron, zone, at)
    following = next_fire_after(schedule, fire)
    assert following is not None
    assert following > fire


@PROPERTIES
@given(cron=crons(), zoned=zoned_instants())
def test_next_fire_is_strictly_later_and_matches_the_policy(
    cron: Cron, zoned: tuple[ZoneInfo, datetime]
) -> None:
    """If any cron is asked for its next fire, then it is later, in UTC, and follows the policy.

    The fire's local wall time matches the cron, or the fire is a jump instant; and it
    equals the first minute a brute-force scan of the policy finds.
    """
    zone, at = zoned
    check_next_fire(cron, zone, at)


SPRING_FORWARDS = [
    (ZoneInfo(name), change)
    for name, changes in OFFSET_CHANGES.items()
    for change in changes
    if is_jump(change, ZoneInfo(name))
]


@PROPERTIES
@given(
    spring_forward=st.sampled_from(SPRING_FORWARDS),
    minute=cron_field(59),
    before=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(hours=3)),
)
def test_next_fire_before_a_gap_matches_the_policy(
    spring_forward: tuple[ZoneInfo, datetime], minute: tuple[str, frozenset[int]], before: timedelta
) -> None:
    """If a cron for the skipped hour is asked just before the gap, then it follows the policy."""
    zone, change = spring_forward
    skipped_hour = ((change - timedelta(seconds=1)).astimezone(zone).hour + 1) % 24
    cron = Cron(f"{minute[0]} {skipped_hour} * * *", minute[1], frozenset({skipped_hour}))
    check_next_fire(cron, zone, change - before)


FALL_BACKS = [
    (ZoneInfo(name), change)
    for name, changes in OFFSET_CHANGES.items()
    for change in changes
    if not is_jump(change, ZoneInfo(name))
]


@PROPERTIES
@given(
    fall_back=st.sampled_from(FALL_BACKS),
    minute=cron_field(59),
    step=st.integers(0, 23),
    around=st.timedeltas(min_value=-timedelta(hours=3), max_value=timedelta(hours=2)),
)
def test_next_fire_around_a_repeated_stretch_matches_the_policy(
    fall_back: tuple[ZoneInfo, datetime],
    minute: tuple[str, frozenset[int]],
    step: int,
    around: timedelta,
) -> None:
    """If a cron is asked around a fall-back, then it follows the policy.

    The hour is a wildcard (``*`` or ``*/step``) or, for step 0, fixed on the repeated
    hour. In particular from inside the first pass, where a wildcard-hour cron's next
    fire can be the second occurrence of a wall time already passed.
    """
    zone, change = fall_back
    if step == 0:
        repeated_hour = (change - timedelta(seconds=1)).astimezone(zone).hour
        hour, hours = str(repeated_hour), frozenset({repeated_hour})
    else:
        hour = "*" if step == 1 else f"*/{step}"
        hours = frozenset(range(0, 24, step))
    cron = Cron(f"{minute[0]} {hour} * * *", minute[1], hours, wildcard_hour=step > 0)
    check_next_fire(cron, zone, change + around)


@PROPERTIES
@given(
    cron=crons(),
    zoned=zoned_instants(),
    span=st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=30)),
    limit=st.integers(0, 40),
)
def test_fires_between_equals_iterating_next_fire(
    cron: Cron, zoned: tuple[ZoneInfo, datetime], span: timedelta, limit: int
) -> None:
    """If fires are listed for an interval, then they are what next_fire_after steps through."""
    zone, after = zoned
    schedule = CronSchedule(cron.expression, zone.key)
    until = after + span
    fires = fires_between(schedule, after, until, limit=limit)
    assert all(after < fire <= until for fire in fires)
    assert all(earlier < later for earlier, later in itertools.pairwise(fires))
    stepped: list[datetime] = []
    cursor = next_fire_after(schedule, after)
    while cursor is not None and cursor <= until and len(stepped) < limit:
        stepped.append(cursor)
        cursor = next_fire_after(schedule, cursor)
    assert fires == stepped


# --- Validation ------------------------------------------------------------------------


NAIVE_RUN_AT = datetime(2026, 1, 1, 9, tzinfo=UTC).replace(tzinfo=None)


@pytest.mark.parametrize(
    ("schedule", "min_interval", "field", "fragment"),
    [
        (
            CronSchedule("0 0 12 * * *"),
            DEFAULT_MIN_INTERVAL,
            "schedule.expression",
            (
                "has 6 fields; jobledger takes 5-field cron (minute hour day month weekday), "
                "seconds are not supported"
            ),
        ),
        (
            CronSchedule("* * * * * *"),
            DEFAULT_MIN_INTERVAL,
            "schedule.expression",
            "seconds are not supported",
        ),
        (CronSchedule("@reboot"), DEFAULT_MIN_INTERVAL, "schedule.expression", "@reboot"),
        (
            CronSchedule("@fortnightly"),
            DEFAULT_MIN_INTERVAL,
            "schedule.expression",
            "not a known cron nickname",
        ),
        (CronSchedule("every day"), DEFAULT_MIN_INTERVAL, "schedule.expression", "has 2 fields"),
        (
            CronSchedule("a b c d e"),
            DEFAULT_MIN_INTERVAL,
            "schedule.expression",
            "not a valid cron expression",
        ),
        (
            CronSchedule("61 * * * *"),
            DEFAULT_MIN_INTERVAL,
            "schedule.expression",
            "not a valid cron expression",
        ),
        (CronSchedule("R * * * *"), DEFAULT_MIN_INTERVAL, "schedule.expression", "random (R)"),
        (
            CronSchedule("* * * * *", "Mars/Olympus"),
            DEFAULT_MIN_INTERVAL,
            "schedule.timezone",
            "use an IANA region name such as Europe/Berlin",
        ),
        (
            CronSchedule("*/2 * * * *"),
            timedelta(minutes=5),
            "schedule.expression",
            "fires 120 s apart",
        ),
        (
            # Two hours apart on the wall clock, one hour apart at spring forward.
            CronSchedule("0 1,3 * * *", "America/New_York"),
            timedelta(minutes=90),
            "schedule.expression",
            "fires 3600 s apart",
        ),
        (CronSchedule("0 0 30 2 *"), DEFAULT_MIN_INTERVAL, "schedule.expression", "never fires"),
        (
            OneShotSchedule(NAIVE_RUN_AT),
            DEFAULT_MIN_INTERVAL,
            "schedule.run_at",
            "has no time zone",
        ),
    ],
)
def test_invalid_schedule_is_rejected_naming_the_field(
    schedule: Schedule, min_interval: timedelta, field: str, fragment: str
) -> None:
    """If a schedule cannot be used, then validation names the field and the problem."""
    with pytest.raises(InvalidDefinitionError) as caught:
        validate_schedule(schedule, min_interval=min_interval)
    assert caught.value.field == field
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("schedule", "min_interval"),
    [
        *[(CronSchedule(nickname), DEFAULT_MIN_INTERVAL) for nickname in ("@yearly", "@annually")],
        *[(CronSchedule(nickname), DEFAULT_MIN_INTERVAL) for nickname in ("@monthly", "@weekly")],
        *[(CronSchedule(nickname), DEFAULT_MIN_INTERVAL) for nickname in ("@daily", "@midnight")],
        (CronSchedule("@HOURLY"), DEFAULT_MIN_INTERVAL),
        (CronSchedule("* * * * *"), DEFAULT_MIN_INTERVAL),
        (CronSchedule("*/5 * * * *"), timedelta(minutes=5)),
        (CronSchedule("0 */2 * * *", "UTC"), timedelta(hours=2)),
        (CronSchedule("0 0 29 2 *"), DEFAULT_MIN_INTERVAL),
        (CronSchedule("0 9 * * mon-fri", "Europe/Berlin"), timedelta(hours=1)),
        (CronSchedule("30 2 * * *", "America/New_York"), timedelta(hours=12)),
        (OneShotSchedule(utc(2026, 1, 1, 9)), DEFAULT_MIN_INTERVAL),
        (ManualSchedule(), DEFAULT_MIN_INTERVAL),
    ],
)
def test_valid_schedule_is_accepted(schedule: Schedule, min_interval: timedelta) -> None:
    """If a schedule is well formed and spaced enough, then validation passes."""
    validate_schedule(schedule, min_interval=min_interval)


@settings(max_examples=200, deadline=None)
@given(expression=st.text(alphabet=" */,-0123456789@LWHR#?abcdefmnorstuwy", max_size=24))
def test_validation_only_ever_raises_the_domain_error(expression: str) -> None:
    """If any text is given as a cron, then validation passes or raises InvalidDefinitionError."""
    schedule = CronSchedule(expression)
    try:
        validate_schedule(schedule)
    except InvalidDefinitionError as error:
        rejected_field: str | None = error.field
    else:
        rejected_field = None
    if rejected_field is None:
        assert next_fire_after(schedule, utc(2026, 1, 1)) is not None
    else:
        assert rejected_field == "schedule.expression"


def test_schedules_round_trip_as_a_tagged_union() -> None:
    """If a schedule is encoded, then decoding as Schedule gives back the same value."""
    schedules: list[Schedule] = [
        CronSchedule("*/15 * * * *", "Europe/Berlin"),
        OneShotSchedule(utc(2026, 3, 8, 7)),
        ManualSchedule(),
    ]
    for schedule in schedules:
        encoded = msgspec.json.encode(schedule)
        assert msgspec.json.decode(encoded, type=Schedule) == schedule
    assert msgspec.json.decode(b'{"type": "cron", "expression": "0 * * * *"}', type=Schedule) == (
        CronSchedule("0 * * * *", "UTC")
    )


# --- One-shot and manual ---------------------------------------------------------------


def test_one_shot_fires_once_at_run_at() -> None:
    """If a one-shot is asked before, at and after run_at, then only `before` sees a fire."""
    run_at = datetime(2026, 3, 8, 3, tzinfo=NEW_YORK)
    schedule = OneShotSchedule(run_at)
    fire = next_fire_after(schedule, run_at.astimezone(UTC) - timedelta(seconds=1))
    assert fire == run_at
    assert fire is not None
    assert fire.tzinfo is UTC
    assert next_fire_after(schedule, run_at) is None
    assert next_fire_after(schedule, run_at + timedelta(days=1)) is None


def test_one_shot_fires_between_only_inside_the_interval() -> None:
    """If run_at is in (after, until], then fires_between lists it, else nothing."""
    run_at = utc(2026, 1, 1, 9)
    schedule = OneShotSchedule(run_at)
    assert fires_between(schedule, run_at - MINUTE, run_at, limit=1) == [run_at]
    assert fires_between(schedule, run_at, run_at + MINUTE, limit=1) == []
    assert fires_between(schedule, run_at - MINUTE, run_at - MINUTE / 2, limit=1) == []
    assert fires_between(schedule, run_at - MINUTE, run_at, limit=0) == []


def test_manual_schedule_never_fires() -> None:
    """If the schedule is manual, then there is no next fire and no fire in any interval."""
    assert next_fire_after(ManualSchedule(), utc(2026, 1, 1)) is None
    assert fires_between(ManualSchedule(), utc(2026, 1, 1), utc(2027, 1, 1), limit=10) == []


def test_naive_instants_are_refused() -> None:
    """If an instant has no zone, then the functions raise ValueError instead of guessing."""
    naive = NAIVE_RUN_AT
    with pytest.raises(ValueError, match="zone-aware"):
        next_fire_after(CronSchedule("* * * * *"), naive)
    with pytest.raises(ValueError, match="zone-aware"):
        fires_between(CronSchedule("* * * * *"), naive, utc(2026, 1, 2), limit=1)
    with pytest.raises(ValueError, match="zone-aware"):
        next_fire_after(OneShotSchedule(naive), utc(2026, 1, 1))
    with pytest.raises(ValueError, match="zone-aware"):
        plan_catch_up([naive], policy=MisfirePolicy.FIRE_ALL, cap=1)


def test_a_cron_that_never_fires_has_no_next_fire() -> None:
    """If a cron matches no date, then next_fire_after raises ValueError."""
    with pytest.raises(ValueError, match="never fires"):
        next_fire_after(CronSchedule("0 0 30 2 *"), utc(2026, 1, 1))


# --- Catch-up ----------------------------------------------------------------------------


DUE = (utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3), utc(2026, 1, 1, 4))


@pytest.mark.parametrize(
    ("policy", "cap", "fire", "missed"),
    [
        (MisfirePolicy.SKIP, 10, (), MissedFires(DUE[0], DUE[3], 4)),
        (MisfirePolicy.FIRE_ONCE, 10, (DUE[3],), MissedFires(DUE[0], DUE[2], 3)),
        (MisfirePolicy.FIRE_ONCE, 1, (DUE[3],), MissedFires(DUE[0], DUE[2], 3)),
        (MisfirePolicy.FIRE_ALL, 10, DUE, None),
        (MisfirePolicy.FIRE_ALL, 4, DUE, None),
        (MisfirePolicy.FIRE_ALL, 3, DUE[:3], MissedFires(DUE[3], DUE[3], 1)),
        (MisfirePolicy.FIRE_ALL, 1, DUE[:1], MissedFires(DUE[1], DUE[3], 3)),
    ],
)
def test_catch_up_plan_follows_the_policy(
    policy: MisfirePolicy,
    cap: int,
    fire: tuple[datetime, ...],
    missed: MissedFires | None,
) -> None:
    """If occurrences are overdue, then the policy and cap decide which fire and which miss."""
    assert plan_catch_up(DUE, policy=policy, cap=cap) == CatchUpPlan(fire=fire, missed=missed)


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_catch_up_plan_for_nothing_due_is_empty(policy: MisfirePolicy) -> None:
    """If nothing is overdue, then nothing fires and nothing is missed."""
    assert plan_catch_up([], policy=policy, cap=5) == CatchUpPlan(fire=(), missed=None)


def test_catch_up_plan_orders_by_instant_not_by_wall_time() -> None:
    """If due occurrences share a zone across fall-back, then they are ordered as instants."""
    first = datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK)  # EDT, 05:30 UTC
    second = datetime(2026, 11, 1, 1, 10, fold=1, tzinfo=NEW_YORK)  # EST, 06:10 UTC
    plan = plan_catch_up([first, second], policy=MisfirePolicy.FIRE_ALL, cap=2)
    assert plan == CatchUpPlan(fire=(utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 10)), missed=None)
    assert all(fire.tzinfo is UTC for fire in plan.fire)


def test_catch_up_plan_refuses_bad_input() -> None:
    """If the cap is below 1 or `due` is not ascending, then planning raises ValueError."""
    with pytest.raises(ValueError, match="cap"):
        plan_catch_up(DUE, policy=MisfirePolicy.FIRE_ALL, cap=0)
    with pytest.raises(ValueError, match="ascending"):
        plan_catch_up(DUE[::-1], policy=MisfirePolicy.FIRE_ALL, cap=2)


@settings(max_examples=200, deadline=None)
@given(
    due=st.lists(
        st.datetimes(
            min_value=datetime(2025, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
            max_value=datetime(2028, 12, 31),  # noqa: DTZ001
            timezones=st.just(UTC),
        ),
        unique=True,
        max_size=30,
    ).map(sorted),
    policy=st.sampled_from(MisfirePolicy),
    cap=st.integers(1, 40),
)
def test_catch_up_plan_partitions_the_due_occurrences(
    due: list[datetime], policy: MisfirePolicy, cap: int
) -> None:
    """If any ascending occurrences are planned, then each one either fires or is missed."""
    plan = plan_catch_up(due, policy=policy, cap=cap)
    missed_count = plan.missed.count if plan.missed else 0
    assert len(plan.fire) + missed_count == len(due)
    position = 0
    for fire in plan.fire:  # a subsequence of due
        position = due.index(fire, position) + 1
    if plan.missed is not None:
        missed = [item for item in due if plan.missed.first <= item <= plan.missed.last]
        assert len(missed) == plan.missed.count
        assert not set(missed) & set(plan.fire)
