"""Request and response bodies of the REST API, and their mapping to the domain.

Requests forbid unknown fields, so a typo is an error instead of a silently ignored
setting. Durations are seconds (JSON has no duration type); times are ISO 8601 with
an offset.
"""

from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

import msgspec

from jobledger.domain.definitions import DEFAULT_PRIORITY, ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy, RetryPolicy
from jobledger.domain.schedules import CronSchedule, ManualSchedule, OneShotSchedule, Schedule

# Bounds that keep a number convertible (a duration of 1e300 s is an overflow, not a
# validation message); the domain checks the real limits and names the fix.
Seconds = Annotated[float, msgspec.Meta(ge=0, le=10_000_000)]
SmallInt = Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)]
# PostgreSQL text cannot hold NUL, and no name, reason or filter needs one.
NO_NUL = "^[^\\x00]*$"
Text = Annotated[str, msgspec.Meta(max_length=2000, pattern=NO_NUL)]
Short = Annotated[str, msgspec.Meta(max_length=200, pattern=NO_NUL)]
Tiny = Annotated[str, msgspec.Meta(max_length=64, pattern=NO_NUL)]
AwareTime = Annotated[datetime, msgspec.Meta(tz=True)]
Payload = Annotated[
    dict[str, Any],
    msgspec.Meta(
        description=(
            "a JSON object for the handler: integers within signed 64 bits, no NUL in keys "
            "or strings, keys up to 256 characters, nesting up to 32 levels, at most "
            "JOBLEDGER_MAX_PAYLOAD_BYTES as JSON; a value past a limit is refused with "
            "422 naming its path"
        )
    ),
]
Zone = Annotated[
    str,
    msgspec.Meta(
        max_length=64,
        pattern=NO_NUL,
        description="an IANA region name (Area/Location, Etc/..., or UTC), e.g. Europe/Berlin",
    ),
]


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


def strict_bodies() -> list[type[Strict]]:
    """Every request body type (each refuses unknown fields)."""
    found: list[type[Strict]] = []
    pending = [Strict]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found


class RetryIn(Strict):
    max_retries: SmallInt = 3
    initial_backoff_seconds: Seconds = 1.0
    max_backoff_seconds: Seconds = 300.0
    jitter: bool = True


class CronIn(Strict, tag="cron", tag_field="kind"):
    cron: Short
    timezone: Zone = "UTC"


class OnceIn(Strict, tag="once", tag_field="kind"):
    run_at: AwareTime


class ManualIn(Strict, tag="manual", tag_field="kind"):
    pass


ScheduleIn = CronIn | OnceIn | ManualIn


class ExecutionIn(Strict):
    """What to run: a handler, its payload and how to retry it."""

    handler: Short
    payload: Payload = msgspec.field(default_factory=dict)
    queue: Tiny = "default"
    priority: SmallInt = DEFAULT_PRIORITY
    timeout_seconds: Seconds = 300.0
    retry: RetryIn = msgspec.field(default_factory=RetryIn)


class JobIn(ExecutionIn, kw_only=True):
    """A job definition: what to run and when."""

    name: Short
    schedule: ScheduleIn = msgspec.field(default_factory=ManualIn)
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    catch_up_cap: SmallInt = 10
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    description: Text = ""


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
    misfire: MisfirePolicy | msgspec.UnsetType = msgspec.UNSET
    catch_up_cap: SmallInt | msgspec.UnsetType = msgspec.UNSET
    overlap: OverlapPolicy | msgspec.UnsetType = msgspec.UNSET
    description: Text | msgspec.UnsetType = msgspec.UNSET


class ReasonIn(Strict):
    reason: Text = ""


class BulkRequeueIn(Strict):
    """Which dead letters to requeue; empty filters match all of them."""

    queue: Tiny | None = None
    handler: Short | None = None
    job_id: UUID | None = None
    error_contains: Text | None = None
    reason: Text = ""
    dry_run: bool = False


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


class Fire(msgspec.Struct):
    at: datetime
    local: str


class PreviewOut(msgspec.Struct):
    timezone: str
    fires: list[Fire]


# ---- mapping ---------------------------------------------------------------------------


def to_schedule(schedule: ScheduleIn) -> Schedule:
    match schedule:
        case CronIn():
            return CronSchedule(schedule.cron, schedule.timezone)
        case OnceIn():
            return OneShotSchedule(schedule.run_at)
        case _:
            return ManualSchedule()


def from_schedule(schedule: Schedule) -> ScheduleIn:
    match schedule:
        case CronSchedule():
            return CronIn(cron=schedule.expression, timezone=schedule.timezone)
        case OneShotSchedule():
            return OnceIn(run_at=schedule.run_at)
        case _:
            return ManualIn()


def to_spec(body: ExecutionIn) -> ExecutionSpec:
    retry = body.retry
    return ExecutionSpec(
        handler=body.handler,
        payload=body.payload,
        queue=body.queue,
        priority=body.priority,
        timeout=timedelta(seconds=body.timeout_seconds),
        retry=RetryPolicy(
            max_retries=retry.max_retries,
            initial_backoff=timedelta(seconds=retry.initial_backoff_seconds),
            max_backoff=timedelta(seconds=retry.max_backoff_seconds),
            jitter=retry.jitter,
        ),
    )


def to_definition(body: JobIn) -> JobDefinition:
    return JobDefinition(
        name=body.name,
        spec=to_spec(body),
        schedule=to_schedule(body.schedule),
        misfire=body.misfire,
        catch_up_cap=body.catch_up_cap,
        overlap=body.overlap,
        description=body.description,
    )


def from_definition(definition: JobDefinition) -> JobIn:
    spec, retry = definition.spec, definition.spec.retry
    return JobIn(
        name=definition.name,
        handler=spec.handler,
        payload=spec.payload,
        queue=spec.queue,
        priority=spec.priority,
        timeout_seconds=spec.timeout.total_seconds(),
        retry=RetryIn(
            max_retries=retry.max_retries,
            initial_backoff_seconds=retry.initial_backoff.total_seconds(),
            max_backoff_seconds=retry.max_backoff.total_seconds(),
            jitter=retry.jitter,
        ),
        schedule=from_schedule(definition.schedule),
        misfire=definition.misfire,
        catch_up_cap=definition.catch_up_cap,
        overlap=definition.overlap,
        description=definition.description,
    )


def patched(current: JobIn, patch: JobPatch) -> JobIn:
    changes = {
        name: value
        for name in patch.__struct_fields__
        if (value := getattr(patch, name)) is not msgspec.UNSET
    }
    return msgspec.structs.replace(current, **changes)


def job_status(job: Job) -> str:
    if job.deleted:
        return "deleted"
    return "paused" if job.paused else "active"


def job_out(job: Job, *, as_of: datetime | None = None) -> JobOut:
    return JobOut(
        id=job.id,
        version=job.version,
        status=job_status(job),
        next_fire_at=job.next_fire_at,
        last_scheduled_for=job.last_scheduled_for,
        fired_count=job.fired_count,
        definition=from_definition(job.definition),
        as_of=as_of,
    )
