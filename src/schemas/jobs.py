"""Job bodies: a definition as the API takes it, a job as it answers, schedule previews."""

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec

from jobledger.domain.policies import DEFAULT_PRIORITY, MisfirePolicy, OverlapPolicy
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


class ManagedJobIn(JobIn, kw_only=True):
    """A job that code declares: a definition, and the stable key it is applied by."""

    key: Key


class ApplyIn(Strict):
    """The whole set of jobs code declares. ``prune`` deletes the managed jobs the set
    no longer has; ``dry_run`` only plans."""

    jobs: Annotated[list[ManagedJobIn], msgspec.Meta(max_length=10_000)]
    prune: bool = False
    dry_run: bool = False


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


class ApplyOut(msgspec.Struct, kw_only=True):
    plan: list[PlannedChange]
    applied: bool  # False for a dry run, and when nothing was to change


class Fire(msgspec.Struct):
    at: datetime
    local: str


class PreviewOut(msgspec.Struct):
    timezone: str
    fires: list[Fire]
