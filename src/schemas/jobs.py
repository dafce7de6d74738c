"""Job bodies: a definition as the API takes it, a job as it answers, schedule previews."""

from datetime import datetime
from typing import Annotated
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


class Fire(msgspec.Struct):
    at: datetime
    local: str


class PreviewOut(msgspec.Struct):
    timezone: str
    fires: list[Fire]
