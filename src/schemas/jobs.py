"""Job bodies: a definition as the API takes it, a job as it answers, schedule previews,
a job's dependencies and backfills."""

from datetime import date, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec

from jobledger.domain.bounds import MAX_EXCLUDE_DATES, MAX_INTERVAL, MAX_JITTER
from jobledger.domain.calendars import MAX_CALENDARS
from jobledger.domain.policies import (
    DEFAULT_PRIORITY,
    BackfillOverlap,
    MisfirePolicy,
    OverlapPolicy,
    WaitFor,
)
from jobledger.schemas.fields import (
    AwareTime,
    Payload,
    Seconds,
    Short,
    SmallInt,
    Strict,
    Text,
    Tiny,
    Zone,
)
from jobledger.schemas.limits import Concurrency, Period, Rate

_MAX_INTERVAL_SECONDS = int(MAX_INTERVAL.total_seconds())
ExcludeDates = Annotated[list[date], msgspec.Meta(max_length=MAX_EXCLUDE_DATES)]


class RetryIn(Strict):
    max_retries: SmallInt = 3
    initial_backoff_seconds: Seconds = 1.0
    max_backoff_seconds: Seconds = 300.0
    jitter: bool = True


class RulesIn(Strict, kw_only=True):
    """What every recurring schedule may add: a window, exclusions, jitter."""

    jitter_seconds: Annotated[int, msgspec.Meta(ge=0, le=int(MAX_JITTER.total_seconds()))] = 0
    start_at: AwareTime | None = None
    end_at: AwareTime | None = None
    exclude_dates: Annotated[list[date], msgspec.Meta(max_length=MAX_EXCLUDE_DATES)] = (
        msgspec.field(default_factory=list)
    )
    calendars: Annotated[list[Tiny], msgspec.Meta(max_length=MAX_CALENDARS)] = msgspec.field(
        default_factory=list
    )


class CronIn(RulesIn, tag="cron", tag_field="kind", kw_only=True):
    cron: Short
    timezone: Zone = "UTC"


class IntervalIn(RulesIn, tag="interval", tag_field="kind", kw_only=True):
    """Every ``every_seconds`` of elapsed time, at epoch multiples plus the offset."""

    every_seconds: Annotated[int, msgspec.Meta(ge=1, le=_MAX_INTERVAL_SECONDS)]
    offset_seconds: Annotated[int, msgspec.Meta(ge=0, le=_MAX_INTERVAL_SECONDS)] = 0
    timezone: Zone = "UTC"


class OnceIn(Strict, tag="once", tag_field="kind"):
    run_at: AwareTime


class ManualIn(Strict, tag="manual", tag_field="kind"):
    pass


ScheduleIn = CronIn | IntervalIn | OnceIn | ManualIn


class ConcurrencyIn(Strict):
    """At most ``max`` runs with ``key`` at once (``{payload.field}`` takes a value of
    the payload); without ``max``, the named limit of that key decides."""

    key: Short
    max: Concurrency | None = None


class RateIn(Strict):
    """At most ``limit`` runs with ``key`` start in any ``per_seconds``; without both,
    the named limit of that key decides."""

    key: Short
    limit: Rate | None = None
    per_seconds: Period | None = None


class LimitsIn(Strict):
    """The limits a run waits for before it starts (it spends no attempt waiting)."""

    concurrency: ConcurrencyIn | None = None
    rate: RateIn | None = None


class ExecutionIn(Strict):
    """What to run: a handler, its payload, how to retry it, and its limits."""

    handler: Short
    payload: Payload = msgspec.field(default_factory=dict)
    queue: Tiny = "default"
    priority: SmallInt = DEFAULT_PRIORITY
    timeout_seconds: Seconds = 300.0
    retry: RetryIn = msgspec.field(default_factory=RetryIn)
    limits: LimitsIn | None = None


class DependencyIn(Strict):
    """An upstream job (its id, or the key it was created or declared with) and the
    state its run must reach: ``completed``, or ``finished`` (any end)."""

    job: Short
    on: WaitFor = WaitFor.COMPLETED


class JobIn(ExecutionIn, kw_only=True):
    """A job definition: what to run and when."""

    name: Short
    schedule: ScheduleIn = msgspec.field(default_factory=ManualIn)
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    catch_up_cap: SmallInt = 10
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    description: Text = ""
    depends_on: Annotated[list[DependencyIn], msgspec.Meta(max_length=20)] = msgspec.field(
        default_factory=list
    )
    pause_on_failure: bool = False


class JobPatch(Strict):
    """Fields to change; the others keep their values."""

    name: Short | msgspec.UnsetType = msgspec.UNSET
    handler: Short | msgspec.UnsetType = msgspec.UNSET
    schedule: ScheduleIn | msgspec.UnsetType = msgspec.UNSET
    payload: Payload | msgspec.UnsetType = msgspec.UNSET
    queue: Tiny | msgspec.UnsetType = msgspec.UNSET
    priority: SmallInt | msgspec.UnsetType = msgspec.UNSET
    timeout_seconds: Seconds | msgspec.UnsetType = msgspec.UNSET
    retry: RetryIn | msgspec.UnsetType = msgspec.UNSET
    limits: LimitsIn | msgspec.UnsetType | None = msgspec.UNSET
    misfire: MisfirePolicy | msgspec.UnsetType = msgspec.UNSET
    catch_up_cap: SmallInt | msgspec.UnsetType = msgspec.UNSET
    overlap: OverlapPolicy | msgspec.UnsetType = msgspec.UNSET
    description: Text | msgspec.UnsetType = msgspec.UNSET
    depends_on: list[DependencyIn] | msgspec.UnsetType = msgspec.UNSET
    pause_on_failure: bool | msgspec.UnsetType = msgspec.UNSET


class ReasonIn(Strict):
    reason: Text = ""


class PreviewIn(Strict):
    schedule: ScheduleIn
    count: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10
    after: AwareTime | None = None


class JobOut(msgspec.Struct, kw_only=True):
    id: UUID
    version: int
    status: str
    next_fire_at: datetime | None
    last_scheduled_for: datetime | None
    fired_count: int
    definition: JobIn
    as_of: datetime | None = None
    # "code" for a job that `jobledger apply` manages (by ``key``), else "api".
    source: str = "api"
    key: str | None = None
    # The scope `jobledger apply` declared a managed job in (None: none, or not managed).
    scope: str | None = None


# ---- jobs declared in code, applied as a set ---------------------------------------

Key = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=200,
        pattern="^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        description="the job's stable name in code, e.g. billing.monthly",
    ),
]


Scope = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=200,
        description="the set of declared jobs, e.g. a module or a file: shop.jobs",
    ),
]


class ManagedJobIn(JobIn, kw_only=True):
    """A job that code declares: a definition, and the stable key it is applied by."""

    key: Key


class ApplyIn(Strict):
    """The whole set of jobs code declares in ``scope``. ``prune`` deletes the managed
    jobs of that scope the set no longer has; ``dry_run`` only plans."""

    jobs: Annotated[list[ManagedJobIn], msgspec.Meta(max_length=10_000)]
    prune: bool = False
    dry_run: bool = False
    # The set's scope (a module, a file, a team): its jobs record it, and ``prune``
    # deletes only managed jobs of this scope. None: the jobs of no scope (ADR 82).
    scope: Scope | None = None


class FieldChange(msgspec.Struct):
    field: str  # a dotted path into the definition, e.g. schedule.cron
    old: Any
    new: Any


class PlannedChange(msgspec.Struct, kw_only=True):
    key: str
    action: Literal["create", "update", "unchanged", "delete"]
    job_id: UUID
    name: str
    changes: list[FieldChange] = msgspec.field(default_factory=list)
    # The job's definition once applied (a delete: the one it had), in the shape GET
    # answers; None from a server older than this field.
    definition: JobIn | None = None


class ApplyOut(msgspec.Struct, kw_only=True):
    plan: list[PlannedChange]
    applied: bool  # False for a dry run, and when nothing was to change


class Fire(msgspec.Struct):
    """One occurrence: when it runs (``at``, its time plus its jitter) in UTC and in
    the schedule's zone, its nominal time, and whether an exclusion skips it."""

    at: datetime
    local: str
    scheduled_for: datetime | None = None
    excluded: bool = False


class PreviewOut(msgspec.Struct):
    timezone: str
    fires: list[Fire]


# ---- dependencies and backfill -------------------------------------------------------


class JobLink(msgspec.Struct, kw_only=True):
    """An upstream or downstream job: its id, name and status, and what it waits for."""

    id: UUID
    name: str
    status: str
    on: WaitFor


class DependenciesOut(msgspec.Struct, kw_only=True):
    upstreams: list[JobLink]
    downstreams: list[JobLink]


class BackfillIn(Strict, kw_only=True):
    """Fire the occurrences in ``[start, end]`` that never fired (``max``: refuse if
    more would); ``dry_run`` only counts."""

    start: AwareTime
    end: AwareTime
    overlap: BackfillOverlap = BackfillOverlap.ALLOW
    max: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    reason: Text = ""
    dry_run: bool = False


class BackfillReport(msgspec.Struct, kw_only=True):
    """What a backfill did (or, with ``dry_run``, would do)."""

    job_id: UUID
    dry_run: bool
    overlap: BackfillOverlap
    occurrences: int  # in the window
    already_fired: int  # have an execution (or wait in an earlier buffer)
    excluded: int  # on an excluded date or a holiday: never fired
    to_fire: int  # the rest: what the backfill takes on
    fired: int  # fired now
    buffered: int  # buffer_all: waiting to fire one after another
    skipped: int  # skip: recorded missed, overlapping the one fired
    missing: list[datetime]  # the first of the occurrences to fire, in order
