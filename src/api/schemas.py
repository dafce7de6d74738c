"""The request and response bodies of the REST API, and their mapping to the domain.

The bodies themselves are defined once in ``jobledger.schemas`` (the client decodes
the same classes); this module maps them to the domain's value objects and back.
"""

from datetime import datetime, timedelta

import msgspec

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import CronSchedule, ManualSchedule, OneShotSchedule, Schedule
from jobledger.schemas.executions import BulkRequeueIn
from jobledger.schemas.fields import NO_NUL, Short, Strict, strict_bodies
from jobledger.schemas.jobs import (
    CronIn,
    ExecutionIn,
    Fire,
    JobIn,
    JobOut,
    JobPatch,
    ManualIn,
    OnceIn,
    PreviewIn,
    PreviewOut,
    ReasonIn,
    RetryIn,
    ScheduleIn,
)

__all__ = [
    "NO_NUL",
    "BulkRequeueIn",
    "CronIn",
    "ExecutionIn",
    "Fire",
    "JobIn",
    "JobOut",
    "JobPatch",
    "ManualIn",
    "OnceIn",
    "PreviewIn",
    "PreviewOut",
    "ReasonIn",
    "RetryIn",
    "ScheduleIn",
    "Short",
    "Strict",
    "from_definition",
    "job_out",
    "patched",
    "strict_bodies",
    "to_definition",
    "to_spec",
]


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
