"""Schedules: when a job fires, as pure functions of the schedule and given instants.

A schedule is a value object: a 5-field cron read in an IANA time zone, a single
instant, or manual (the job fires only when asked). Nothing here reads the clock:
the caller passes every instant in. Every datetime argument must be zone-aware
(a naive one raises ``ValueError``) and every datetime returned is in UTC.

Daylight-saving policy. A cron is evaluated in the job's zone on local wall-clock time:

1. A wall-clock time that does not exist (the hour skipped at spring-forward) fires
   once, at the instant of the jump: the first instant after the gap, e.g.
   2026-03-08 03:00 EDT (07:00 UTC) in America/New_York. Several skipped wall times
   collapse into that one fire, and a wall time equal to the first time after the
   gap (03:00 in the example) also collapses into it: one fire, not two.
2. A wall-clock time that occurs twice (the hour repeated at fall-back):

   a. for a cron whose hour field is fixed (does not start with ``*``: e.g.
      ``30 1 * * *``, ``0 1,13 * * *``, ``0 1-3 * * *``, and the nicknames @daily,
      @midnight, @weekly, @monthly, @yearly and @annually), fires once, at its first
      occurrence (fold=0);
   b. for a cron whose hour field starts with ``*`` (``*``, ``*/2``, ...; and the
      nickname @hourly, which is ``0 * * * *``), fires in both passes: at the first
      occurrence (fold=0) and again at the second (fold=1), because such a job is
      about elapsed time. So ``0 * * * *`` in America/New_York fires 25 times on
      local 2026-11-01, and ``*/15 * * * *`` fires every 15 real minutes straight
      through the change (01:00, 01:15, 01:30, 01:45 EDT, then 01:00, 01:15, 01:30,
      01:45 EST, then 02:00 EST).
3. Otherwise a fire is at the instant of the matching wall time.

Rules 1 and 3 hold for both kinds of cron.

So the fires of a cron are strictly increasing instants at least a minute apart.

Cron dialect: exactly five fields (minute hour day month weekday) or one of the
nicknames @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly.
Day of month and weekday combine with OR when both are restricted, as in classic
cron; ``L``, ``W`` and ``#`` are accepted. Seconds, @reboot and the hashed (``H``)
and random (``R``) fields are not: a schedule must give the same fires every time
it is evaluated. A step (``*/15``) lies from 1 to its field's span.

Zones are IANA region names (``Area/Location``, ``Etc/...`` or ``UTC``). Instants a
schedule names lie from ``EARLIEST_INSTANT`` to ``LATEST_INSTANT``, and fires are
computed only within that range: a cron has no fire after its end.

Windows, exclusions, jitter. A recurring schedule (cron or interval) may also say:

- ``start_at`` / ``end_at``: it has occurrences only within ``[start_at, end_at]``;
  none before, and after ``end_at`` it fires no more.
- ``exclude_dates`` and ``calendars``: an occurrence whose local date (in the
  schedule's zone) is one of the dates, or a holiday of one of the named calendars,
  is *excluded*: it stays an occurrence, which the scheduler records as missed with
  reason ``excluded`` instead of firing it.
- ``jitter_seconds``: each occurrence runs a delay after its time, from 0 up to (not
  including) the bound, derived from the job's id and the occurrence: the same every
  time it is computed, so the preview shows the exact run times and the execution's
  id (derived from the occurrence, not the delay) stays the same.

Occurrences are the nominal instants; ``run_time`` adds the jitter.
"""

import copy
import heapq
import itertools
import math
import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Final, assert_never
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import msgspec
from croniter import CroniterBadDateError, croniter

from jobledger.domain.bounds import MAX_EXCLUDE_DATES, MAX_INTERVAL, MAX_JITTER
from jobledger.domain.calendars import MAX_CALENDARS, check_calendar, is_holiday
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.instants import EARLIEST, LATEST, check_instant
from jobledger.domain.json_values import check_text
from jobledger.domain.policies import MisfirePolicy


class ScheduleRules(msgspec.Struct, frozen=True, kw_only=True):
    """The rules every recurring schedule shares (see "Windows, exclusions, jitter")."""

    jitter_seconds: int = 0
    start_at: datetime | None = None
    end_at: datetime | None = None
    exclude_dates: tuple[date, ...] = ()
    calendars: tuple[str, ...] = ()


class CronSchedule(ScheduleRules, frozen=True, tag="cron"):
    """Fires at every local wall-clock time that matches a 5-field cron in an IANA zone."""

    expression: str
    timezone: str = "UTC"


class IntervalSchedule(ScheduleRules, frozen=True, tag="interval"):
    """Fires every ``every_seconds`` of elapsed time, at the instants
    ``1970-01-01T00:00Z + offset_seconds + k * every_seconds``: what cron cannot say
    (every 45 minutes, straight through hours and days). The zone only decides local
    dates (for exclusions and calendars) and how fires are shown; DST changes no fire.
    """

    every_seconds: int
    offset_seconds: int = 0
    timezone: str = "UTC"


class OneShotSchedule(msgspec.Struct, frozen=True, tag="once"):
    """Fires once, at ``run_at`` (zone-aware)."""

    run_at: datetime


class ManualSchedule(msgspec.Struct, frozen=True, tag="manual"):
    """Never fires on its own; the job runs only when triggered."""


Schedule = CronSchedule | IntervalSchedule | OneShotSchedule | ManualSchedule
# The schedules that recur, and so take windows, exclusions and jitter.
Recurring = CronSchedule | IntervalSchedule

DEFAULT_MIN_INTERVAL: Final = timedelta(seconds=60)
# Interval schedules count from here; jitter is derived in this namespace.
INTERVAL_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_JITTER_NAMESPACE: Final = uuid.UUID("8d3a3c0e-2f5b-4c61-9a57-0c1f6e4b7d22")
# start_at is inclusive: occurrences are looked for strictly after a hair before it.
_HAIR: Final = timedelta(microseconds=1)
MAX_CRON_CHARS: Final = 200
MAX_ZONE_CHARS: Final = 64

# The instants a schedule may name, and the span its fires are computed in.
EARLIEST_INSTANT: Final = EARLIEST
LATEST_INSTANT: Final = LATEST
# Time zones are IANA region names (Area/Location), Etc/* and UTC; the other names in
# the database are aliases of the server's own zone (localtime), placeholders
# (Factory) or legacy names kept for old systems.
_ZONE_AREAS: Final = frozenset(
    {
        "Africa",
        "America",
        "Antarctica",
        "Arctic",
        "Asia",
        "Atlantic",
        "Australia",
        "Etc",
        "Europe",
        "Indian",
        "Pacific",
    }
)
_ZONE_FIX: Final = "use an IANA region name such as Europe/Berlin, America/New_York or UTC"
# The values each cron field can take: a step must be from 1 to the field's span.
_CRON_FIELDS: Final = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 6),
)

# Two fires of a 5-field cron are never closer than this, DST included.
_CRON_GRANULARITY: Final = timedelta(seconds=60)
_CRON_FIELD_COUNT: Final = 5
_NICKNAMES: Final = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_FIELD: Final = re.compile(r"\S+", re.ASCII)
_CRON_FIX: Final = "write 5 fields (minute hour day month weekday), e.g. '*/15 * * * *'"
# Candidate wall times in a row that resolve to an instant already passed: the
# minutes of a skipped or repeated stretch, plus the rewind below. A full day is the
# largest real stretch.
_MAX_SKIPPED_CANDIDATES: Final = 4096
# How far back a wildcard-hour cron starts reading wall times when a UTC-offset
# change is near: longer than any repeated stretch (an hour, two in Antarctica/Troll),
# so that second-pass fires of wall times before ``after``'s are not missed.
_REWIND: Final = timedelta(hours=3)
# The spacing check samples this many consecutive fires from each reference start.
_SAMPLE_FIRES: Final = 50
_REFERENCE_YEAR: Final = 2026
# Where a parsed cron template stands; every walk sets its copy's own start.
_TEMPLATE_START: Final = datetime(_REFERENCE_YEAR, 1, 1)  # noqa: DTZ001 (cron runs on naive wall time)


# --- Public functions ---------------------------------------------------------------


def validate_schedule(
    schedule: Schedule, *, min_interval: timedelta = DEFAULT_MIN_INTERVAL
) -> None:
    """Raise ``InvalidDefinitionError`` naming the field if the schedule cannot be used.

    For a cron, consecutive fires closer than ``min_interval`` (in elapsed time, DST
    included) are refused. That spacing is checked on a sample: the fires following
    a few reference instants in 2026, including the days around each of the zone's
    UTC-offset changes that year.
    """
    match schedule:
        case CronSchedule():
            _check_cron(schedule, min_interval)
            _check_rules(schedule)
        case IntervalSchedule():
            _check_interval(schedule, min_interval)
            _check_rules(schedule)
        case OneShotSchedule():
            check_instant("schedule.run_at", schedule.run_at)
        case ManualSchedule():
            pass
        case _:
            assert_never(schedule)


@lru_cache(maxsize=1)
def region_zones() -> frozenset[str]:
    """The time zone names a schedule may use (see ``_ZONE_AREAS``)."""
    return frozenset(
        name
        for name in available_timezones()
        if name == "UTC" or ("/" in name and name.split("/", 1)[0] in _ZONE_AREAS)
    )


def next_fire_after(schedule: Schedule, at: datetime) -> datetime | None:
    """The first fire strictly after ``at``, in UTC; None if the schedule fires no more
    (a cron whose next fire would lie past ``LATEST_INSTANT`` fires no more).

    Raises ``ValueError`` for a naive ``at`` or a schedule that cannot be evaluated: an
    invalid cron or zone, a cron that never fires, a naive ``run_at``.
    """
    at = _as_utc("at", at)
    match schedule:
        case CronSchedule():
            fire = _first_fire_after(schedule, at)
            zone = _zone(schedule.timezone)
            if (
                fire is None
                and next(_cron_fires(schedule.expression, zone, _reference_start(zone)), None)
                is None
            ):
                raise ValueError(f"cron {schedule.expression!r} never fires")
            return fire
        case IntervalSchedule():
            return next(_recurring_fires(schedule, at), None)
        case OneShotSchedule():
            run_at = _one_shot_instant(schedule)
            return run_at if run_at > at else None
        case ManualSchedule():
            return None
        case _:
            assert_never(schedule)


def first_fire(
    schedule: Schedule, at: datetime, *, last: datetime | None = None
) -> datetime | None:
    """The next fire of a schedule saved at ``at``, after the occurrence ``last`` (the
    newest the job fired or missed). A one-shot whose time has passed but that never
    ran is due at once, as a late occurrence; every other fire lies after ``at`` and
    after ``last``, so no occurrence is planned twice."""
    if isinstance(schedule, OneShotSchedule):
        run_at = _one_shot_instant(schedule)
        return run_at if last is None or run_at > _as_utc("last", last) else None
    if last is not None:
        at = max(_as_utc("at", at), _as_utc("last", last))
    return next_fire_after(schedule, at)


def fires_between(
    schedule: Schedule, after: datetime, until: datetime, *, limit: int
) -> list[datetime]:
    """The fires in ``(after, until]``, ascending, in UTC, at most ``limit`` of them."""
    after, until = _as_utc("after", after), _as_utc("until", until)
    if limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    match schedule:
        case CronSchedule() | IntervalSchedule():
            first = _first_fire_after(schedule, after)
            if first is None or first > until or limit == 0:
                return []
            fires = _recurring_fires(schedule, first)
            within = itertools.takewhile(lambda fire: fire <= until, fires)
            return [first, *itertools.islice(within, limit - 1)]
        case OneShotSchedule():
            run_at = _one_shot_instant(schedule)
            return [run_at] if after < run_at <= until and limit > 0 else []
        case ManualSchedule():
            return []
        case _:
            assert_never(schedule)


def upcoming_fires(
    schedule: Schedule, after: datetime, *, horizon: timedelta, limit: int
) -> list[datetime]:
    """The first ``limit`` fires after ``after`` and within ``horizon`` of it, stopping
    at ``LATEST_INSTANT`` (a preview near the end of the calendar is short, not an error)."""
    after = _as_utc("after", after)
    until = LATEST_INSTANT if after >= LATEST_INSTANT - horizon else after + horizon
    return fires_between(schedule, after, until, limit=limit)


# --- Windows, exclusions, jitter ---------------------------------------------------


class Occurrence(msgspec.Struct, frozen=True):
    """One occurrence as a preview shows it: its time, when it runs (the time plus its
    jitter), and whether an exclusion makes it a recorded miss instead of a run."""

    scheduled_for: datetime
    run_at: datetime
    excluded: bool


def schedule_zone(schedule: Schedule) -> str:
    """The zone a schedule's local dates and times are read in."""
    return schedule.timezone if isinstance(schedule, Recurring) else "UTC"


def is_excluded(schedule: Schedule, occurrence: datetime) -> bool:
    """Whether the occurrence falls on an excluded date or a calendar's holiday (its
    local date in the schedule's zone)."""
    if not isinstance(schedule, Recurring):
        return False
    if not schedule.exclude_dates and not schedule.calendars:
        return False
    day = _as_utc("occurrence", occurrence).astimezone(_zone(schedule.timezone)).date()
    return day in schedule.exclude_dates or is_holiday(schedule.calendars, day)


def jitter_of(schedule: Schedule, job_id: uuid.UUID | None, occurrence: datetime) -> timedelta:
    """How long after ``occurrence`` it runs: from 0 up to ``jitter_seconds`` (exclusive),
    in whole milliseconds, derived from the job and the occurrence. No job yet (a
    preview before saving) has no jitter."""
    bound = schedule.jitter_seconds if isinstance(schedule, Recurring) else 0
    if bound <= 0 or job_id is None:
        return timedelta(0)
    key = _as_utc("occurrence", occurrence).isoformat()
    digest = uuid.uuid5(_JITTER_NAMESPACE, f"{job_id}:{key}").int
    return timedelta(milliseconds=digest % (bound * 1000))


def run_time(schedule: Schedule, job_id: uuid.UUID | None, occurrence: datetime) -> datetime:
    """When the occurrence runs: its time plus its jitter."""
    return _as_utc("occurrence", occurrence) + jitter_of(schedule, job_id, occurrence)


def upcoming_occurrences(
    schedule: Schedule,
    after: datetime,
    *,
    horizon: timedelta,
    limit: int,
    job_id: uuid.UUID | None = None,
) -> list[Occurrence]:
    """The first ``limit`` occurrences after ``after`` (within ``horizon``), each with its
    run time and whether it is excluded: what the scheduler will do with each."""
    return [
        Occurrence(fire, run_time(schedule, job_id, fire), is_excluded(schedule, fire))
        for fire in upcoming_fires(schedule, after, horizon=horizon, limit=limit)
    ]


@lru_cache(maxsize=4096)
def _first_fire_after(schedule: Recurring, after: datetime) -> datetime | None:
    """The first occurrence strictly after ``after`` (in UTC), or None. Remembered: a
    scheduler asks for it twice per fire (to plan the fire and to record the next one),
    and jobs that share a schedule fire at the same instants."""
    return next(_recurring_fires(schedule, after), None)


def _recurring_fires(schedule: Recurring, after: datetime) -> Iterator[datetime]:
    """The occurrences strictly after ``after`` within the schedule's window."""
    if schedule.start_at is not None:
        after = max(after, _as_utc("start_at", schedule.start_at) - _HAIR)
    fires: Iterator[datetime]
    if isinstance(schedule, CronSchedule):
        fires = _cron_fires(schedule.expression, _zone(schedule.timezone), after)
    else:
        fires = _interval_fires(schedule.every_seconds, schedule.offset_seconds, after)
    if schedule.end_at is None:
        return fires
    end = _as_utc("end_at", schedule.end_at)
    return itertools.takewhile(lambda fire: fire <= end, fires)


def _interval_fires(every: int, offset: int, after: datetime) -> Iterator[datetime]:
    """``INTERVAL_EPOCH + offset + k * every`` strictly after ``after``, up to
    ``LATEST_INSTANT``; exact (timedelta arithmetic, no floating point)."""
    if every <= 0:
        raise ValueError(f"every_seconds must be positive, got {every}")
    step = timedelta(seconds=every)
    base = INTERVAL_EPOCH + timedelta(seconds=offset)
    after = max(after.astimezone(UTC), EARLIEST_INSTANT)
    fire = base + ((after - base) // step + 1) * step
    while fire <= LATEST_INSTANT:
        yield fire
        fire += step


def _check_interval(schedule: IntervalSchedule, min_interval: timedelta) -> None:
    every = timedelta(seconds=schedule.every_seconds)
    if not max(min_interval, timedelta(seconds=1)) <= every <= MAX_INTERVAL:
        raise InvalidDefinitionError(
            "schedule.every_seconds",
            f"{schedule.every_seconds} s is out of range",
            f"use from {_seconds(max(min_interval, timedelta(seconds=1)))} "
            f"to {_seconds(MAX_INTERVAL)} (366 days)",
        )
    if not 0 <= schedule.offset_seconds < schedule.every_seconds:
        raise InvalidDefinitionError(
            "schedule.offset_seconds",
            f"{schedule.offset_seconds} s is not within the interval",
            f"use from 0 up to {schedule.every_seconds - 1} (less than every_seconds)",
        )
    check_text(schedule.timezone, "schedule.timezone", max_chars=MAX_ZONE_CHARS)
    _check_timezone(schedule.timezone)


def _check_rules(schedule: Recurring) -> None:
    """The window, the exclusions and the jitter a recurring schedule shares."""
    if not 0 <= schedule.jitter_seconds <= MAX_JITTER.total_seconds():
        raise InvalidDefinitionError(
            "schedule.jitter_seconds",
            f"{schedule.jitter_seconds} s is out of range",
            "use from 0 (no jitter) to 86400 (a day)",
        )
    start = (
        None if schedule.start_at is None else check_instant("schedule.start_at", schedule.start_at)
    )
    end = None if schedule.end_at is None else check_instant("schedule.end_at", schedule.end_at)
    if start is not None and end is not None and end < start:
        raise InvalidDefinitionError(
            "schedule.end_at",
            f"{end.isoformat()} is before start_at {start.isoformat()}",
            "give an end_at at or after start_at, or leave one of them out",
        )
    if len(schedule.exclude_dates) > MAX_EXCLUDE_DATES:
        raise InvalidDefinitionError(
            "schedule.exclude_dates",
            f"has {len(schedule.exclude_dates)} dates",
            f"give at most {MAX_EXCLUDE_DATES}; name a calendar for holidays",
        )
    if len(schedule.calendars) > MAX_CALENDARS:
        raise InvalidDefinitionError(
            "schedule.calendars",
            f"names {len(schedule.calendars)} calendars",
            f"name at most {MAX_CALENDARS}",
        )
    for name in schedule.calendars:
        check_calendar(name)


# --- Catch-up after downtime -------------------------------------------------------


class MissedFires(msgspec.Struct, frozen=True):
    """A run of occurrences that will never fire: the first, the last, and how many."""

    first: datetime
    last: datetime
    count: int


class CatchUpPlan(msgspec.Struct, frozen=True):
    """What to do with overdue occurrences: fire some now, record the rest as missed."""

    fire: tuple[datetime, ...]
    missed: MissedFires | None


def plan_catch_up(due: Sequence[datetime], *, policy: MisfirePolicy, cap: int) -> CatchUpPlan:
    """Split the overdue occurrences ``due`` (ascending) by the misfire policy.

    SKIP fires none of them; FIRE_ONCE fires only the latest; FIRE_ALL fires the
    earliest ``cap``. Whatever does not fire is missed. Every occurrence lands in
    exactly one of the two parts.
    """
    if cap < 1:
        raise ValueError(f"cap must be 1 or more, got {cap}")
    occurrences = _ascending_utc(due)
    match policy:
        case MisfirePolicy.SKIP:
            fire: tuple[datetime, ...] = ()
            missed = occurrences
        case MisfirePolicy.FIRE_ONCE:
            fire, missed = occurrences[-1:], occurrences[:-1]
        case MisfirePolicy.FIRE_ALL:
            fire, missed = occurrences[:cap], occurrences[cap:]
        case _:
            assert_never(policy)
    return CatchUpPlan(fire=fire, missed=_missed(missed))


def _ascending_utc(due: Sequence[datetime]) -> tuple[datetime, ...]:
    occurrences = tuple(_as_utc(f"due[{index}]", item) for index, item in enumerate(due))
    for earlier, later in itertools.pairwise(occurrences):
        if not earlier < later:
            raise ValueError(
                f"due must be strictly ascending: {later.isoformat()} follows {earlier.isoformat()}"
            )
    return occurrences


def _missed(missed: tuple[datetime, ...]) -> MissedFires | None:
    if not missed:
        return None
    return MissedFires(first=missed[0], last=missed[-1], count=len(missed))


# --- Validation helpers ------------------------------------------------------------


def _check_cron(schedule: CronSchedule, min_interval: timedelta) -> None:
    check_text(schedule.expression, "schedule.expression", max_chars=MAX_CRON_CHARS)
    check_text(schedule.timezone, "schedule.timezone", max_chars=MAX_ZONE_CHARS)
    _check_expression(schedule.expression)
    zone = _check_timezone(schedule.timezone)
    if next(_cron_fires(schedule.expression, zone, _reference_start(zone)), None) is None:
        raise InvalidDefinitionError(
            "schedule.expression",
            f"{schedule.expression!r} never fires (no calendar date matches it)",
            "use a day and month that exist together, e.g. '0 0 28 2 *' rather than 30 February",
        )
    if min_interval > _CRON_GRANULARITY:
        _check_spacing(schedule.expression, zone, min_interval)


def _check_expression(expression: str) -> None:
    fields = _FIELD.findall(expression)
    if fields and fields[0].startswith("@"):
        _check_nickname(expression, fields)
        return
    if len(fields) != _CRON_FIELD_COUNT:
        seconds = ", seconds are not supported" if len(fields) > _CRON_FIELD_COUNT else ""
        raise InvalidDefinitionError(
            "schedule.expression",
            f"{expression!r} has {_count(len(fields), 'field')}; jobledger takes 5-field cron "
            f"(minute hour day month weekday){seconds}",
            _CRON_FIX,
        )
    if any(_is_hashed_or_random(field) for field in fields):
        raise InvalidDefinitionError(
            "schedule.expression",
            f"{expression!r} uses a hashed (H) or random (R) field, which has no fixed value",
            "write the value out, e.g. '17 * * * *' instead of 'H * * * *'",
        )
    _check_steps(expression, fields)
    try:
        croniter(_cron_text(expression), datetime(_REFERENCE_YEAR, 1, 1), ret_type=datetime)  # noqa: DTZ001 (cron runs on naive wall time)
    except (ValueError, TypeError) as exc:
        raise InvalidDefinitionError(
            "schedule.expression",
            f"{expression!r} is not a valid cron expression ({exc})",
            _CRON_FIX,
        ) from exc


def _check_steps(expression: str, fields: list[str]) -> None:
    """A step of 0 never advances and one past the field's span names a single value:
    both are mistakes, refused with the field's range rather than croniter's words."""
    for (name, low, high), field in zip(_CRON_FIELDS, fields, strict=True):
        for part in field.split(","):
            _, slash, step = part.partition("/")
            if not slash or not (step.isascii() and step.isdigit()):
                continue  # no step, or one croniter refuses by itself
            span = high - low
            if len(step) > len(str(span)) or not 1 <= int(step) <= span:
                raise InvalidDefinitionError(
                    "schedule.expression",
                    f"{expression!r}: the step /{step} in the {name} field is not from 1 to "
                    f"{span} (the field takes {low}-{high})",
                    f"use a step from 1 to {span} in the {name} field",
                )


def _check_nickname(expression: str, fields: list[str]) -> None:
    nickname = fields[0].lower()
    if len(fields) == 1 and nickname in _NICKNAMES:
        return
    if nickname == "@reboot":
        problem = "@reboot is not supported: a ledger job has no boot to run at"
        fix = "use a manual or one-shot schedule, or a 5-field cron"
    else:
        problem = f"{expression!r} is not a known cron nickname"
        fix = f"use one of {', '.join(sorted(_NICKNAMES))}, or a 5-field cron"
    raise InvalidDefinitionError("schedule.expression", problem, fix)


def _check_timezone(name: str) -> ZoneInfo:
    if name in region_zones():
        return _zone(name)
    try:
        _zone(name)
    except ValueError:
        problem = f"{name!r} is not a known time zone"
    else:
        problem = f"{name!r} is not an IANA region name (Area/Location, Etc/... or UTC)"
    raise InvalidDefinitionError("schedule.timezone", problem, _ZONE_FIX)


def _check_spacing(expression: str, zone: ZoneInfo, min_interval: timedelta) -> None:
    closest = _closest_fires(expression, zone)
    if closest is None:
        return
    earlier, later = closest
    if later - earlier < min_interval:
        raise InvalidDefinitionError(
            "schedule.expression",
            f"{expression!r} fires {_seconds(later - earlier)} apart "
            f"(at {earlier.isoformat()} and {later.isoformat()}), "
            f"closer than the minimum interval of {_seconds(min_interval)}",
            f"space the fires at least {_seconds(min_interval)} apart, e.g. with a larger step",
        )


def _closest_fires(expression: str, zone: ZoneInfo) -> tuple[datetime, datetime] | None:
    """The closest pair of consecutive fires found in the samples."""
    closest: tuple[datetime, datetime] | None = None
    for start in _sample_starts(zone):
        sample = itertools.islice(_cron_fires(expression, zone, start), _SAMPLE_FIRES)
        for pair in itertools.pairwise(sample):
            if closest is None or pair[1] - pair[0] < closest[1] - closest[0]:
                closest = pair
    return closest


def _sample_starts(zone: ZoneInfo) -> list[datetime]:
    """Reference instants: a year, day and month boundary, and each offset change."""
    year = _REFERENCE_YEAR
    starts = [
        _reference_start(zone),
        datetime(year, 1, 1, 22, tzinfo=zone),
        datetime(year, 1, 31, 22, tzinfo=zone),
    ]
    for change in _offset_changes(zone, year):
        starts.extend(change - timedelta(minutes=ahead) for ahead in (26 * 60, 3 * 60, 25))
    return starts


def _reference_start(zone: ZoneInfo) -> datetime:
    return datetime(_REFERENCE_YEAR, 1, 1, tzinfo=zone)


@lru_cache(maxsize=64)
def _offset_changes(zone: ZoneInfo, year: int) -> tuple[datetime, ...]:
    """The instants in ``year`` at which the zone's UTC offset changes."""
    changes: list[datetime] = []
    day = datetime(year, 1, 1, tzinfo=UTC)
    while day.year == year:
        following = day + timedelta(days=1)
        if day.astimezone(zone).utcoffset() != following.astimezone(zone).utcoffset():
            changes.append(_offset_change(zone, day, following))
        day = following
    return tuple(changes)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _seconds(interval: timedelta) -> str:
    return f"{interval.total_seconds():g} s"


# --- Evaluation --------------------------------------------------------------------


def _cron_fires(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """The fires strictly after ``after`` and up to ``LATEST_INSTANT``: ascending, unique,
    in UTC. Fires before ``EARLIEST_INSTANT`` are not computed."""
    # Through UTC first: a datetime already in ``zone`` may name a wall time in a gap,
    # which astimezone(zone) would hand back unchanged rather than normalise.
    after = max(after.astimezone(UTC), EARLIEST_INSTANT)
    if after >= LATEST_INSTANT:
        return
    try:
        for fire in _unbounded_cron_fires(expression, zone, after):
            if fire > LATEST_INSTANT:
                return
            yield fire
    except OverflowError:
        return  # the calendar ended before LATEST_INSTANT in this zone's wall time


def _unbounded_cron_fires(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """``_cron_fires`` without the range: may raise OverflowError at the calendar's end."""
    both_passes = _fires_in_both_passes(expression)
    wall = _start_wall(after, zone, rewind=both_passes)
    candidates = _wall_times(expression, wall)
    last = after
    skipped = 0
    for released in _released(candidates, zone, both_passes=both_passes):
        skipped += 1
        for instant in released:
            if instant > last:
                skipped = 0
                last = instant
                yield instant
        if skipped > _MAX_SKIPPED_CANDIDATES:
            raise ValueError(
                f"cron {expression!r}: no progress after {wall.isoformat()} in {zone.key}"
            )


def _fires_in_both_passes(expression: str) -> bool:
    """Whether the cron fires in the second pass of a repeated stretch: a wildcard hour."""
    fields: list[str] = _FIELD.findall(expression)
    if len(fields) == 1:
        return fields[0].lower() == "@hourly"
    return len(fields) > 1 and fields[1].startswith("*")


def _start_wall(after: datetime, zone: ZoneInfo, *, rewind: bool) -> datetime:
    """The naive wall time to read candidates from (they come strictly after it).

    A cron that fires in both passes starts earlier when an offset change is near:
    if ``after`` is in the first pass of a repeated stretch, the second-pass fires of
    the wall times at or before its own are still to come.
    """
    start = after
    if rewind:
        earlier, later = after - _REWIND, after + _REWIND
        if earlier.astimezone(zone).utcoffset() != later.astimezone(zone).utcoffset():
            start = earlier
    # Whole minutes: croniter returns the candidates strictly after its start, and a
    # fire can only fall on a minute. Fold is dropped: naive times have no second pass.
    return start.astimezone(zone).replace(tzinfo=None, fold=0, second=0, microsecond=0)


def _wall_times(expression: str, start: datetime) -> Iterator[datetime]:
    """The naive wall times after ``start`` that match the cron, ascending."""
    # Parsing the expression costs several times what finding the next match does, and
    # a scheduler asks for the same crons over and over: each walk starts from a copy
    # of a parsed template. The copy shares the parsed fields, which croniter only reads.
    candidates = copy.copy(_parsed_cron(expression))
    candidates.set_current(start, force=True)
    latest = start
    while True:
        try:
            latest = candidates.get_next(datetime)
        except CroniterBadDateError:
            return
        except (ValueError, OverflowError):
            # croniter steps past year 9999 with errors of its own; anywhere else the
            # error is real.
            if latest.year >= LATEST_INSTANT.year:
                return
            raise
        yield latest


def _released(
    walls: Iterator[datetime], zone: ZoneInfo, *, both_passes: bool
) -> Iterator[list[datetime]]:
    """For each candidate wall time, the instants now known to come before any later one.

    A candidate resolves (rule 1 or 2a) to an instant no earlier than the resolution
    of the candidates before it. Its second-pass instant (rule 2b) can come after
    the first-pass instants of later candidates, so instants wait in a min-heap until
    a candidate resolves at or after them. Ascending; may repeat an instant.
    """
    pending: list[datetime] = []
    for wall in walls:
        first = _resolve(wall, zone)
        heapq.heappush(pending, first)
        second = _second_pass(wall, zone) if both_passes else None
        if second is not None:
            heapq.heappush(pending, second)
        released: list[datetime] = []
        while pending and pending[0] <= first:
            released.append(heapq.heappop(pending))
        yield released
    yield sorted(pending)


def _second_pass(wall: datetime, zone: ZoneInfo) -> datetime | None:
    """The second occurrence (fold=1) of a repeated wall time; None for any other."""
    # fold=1 reads a repeated wall time with the offset after the change, a later
    # instant; in a gap it reads an earlier one, and elsewhere the same one.
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return second if second > first else None


def _resolve(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant a local wall time fires at: its first occurrence, or the jump."""
    instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    return _jump_instant(wall, zone)


def _jump_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant after the gap that the nonexistent ``wall`` falls into."""
    # In a gap, fold=0 reads the wall time with the offset before the jump and fold=1
    # with the offset after it; the jump lies between the two readings.
    readings = (
        wall.replace(tzinfo=zone, fold=0).astimezone(UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
    )
    return _offset_change(zone, min(readings), max(readings))


def _offset_change(zone: ZoneInfo, start: datetime, end: datetime) -> datetime:
    """The first whole second in ``(start, end]`` whose offset differs from ``start``'s.

    Assumes the offset changes exactly once in the interval.
    """
    low, high = math.floor(start.timestamp()), math.ceil(end.timestamp())
    initial = _offset_at(zone, low)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_at(zone, middle) == initial:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def _offset_at(zone: ZoneInfo, timestamp: int) -> timedelta | None:
    return datetime.fromtimestamp(timestamp, zone).utcoffset()


@lru_cache(maxsize=4096)
def _parsed_cron(expression: str) -> "croniter[datetime]":
    """The cron, parsed once; a template to copy (its position is the copy's to set)."""
    return croniter(_cron_text(expression), _TEMPLATE_START, ret_type=datetime)


def _cron_text(expression: str) -> str:
    """The expression with its fields separated by single spaces."""
    fields = _FIELD.findall(expression)
    if any(_is_hashed_or_random(field) for field in fields):
        raise ValueError(f"cron {expression!r} has a hashed (H) or random (R) field")
    return " ".join(fields)


def _is_hashed_or_random(field: str) -> bool:
    return field[:1].lower() in {"h", "r"}


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def _one_shot_instant(schedule: OneShotSchedule) -> datetime:
    return _as_utc("run_at", schedule.run_at)


def _is_naive(value: datetime) -> bool:
    return value.tzinfo is None or value.utcoffset() is None


def _as_utc(name: str, value: datetime) -> datetime:
    """The instant in UTC. Comparing two datetimes that share a zone compares their wall
    times and ignores ``fold``, so every instant is brought to UTC before any comparison.
    """
    if _is_naive(value):
        raise ValueError(f"{name} must be zone-aware, got naive {value.isoformat()}")
    return value.astimezone(UTC)
