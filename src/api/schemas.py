"""The request and response bodies of the REST API, and their mapping to the domain.

The bodies themselves are defined once in ``jobledger.schemas`` (the client decodes
the same classes), and mapped to the domain's value objects in
``jobledger.services.bodies``; this module answers with them.
"""

from datetime import datetime

import msgspec

from jobledger.domain.job import Job
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
from jobledger.services.bodies import from_definition, to_definition, to_schedule, to_spec

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
    "to_schedule",
    "to_spec",
]


# ---- mapping ---------------------------------------------------------------------------


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
        source=job.source,
        key=job.key if job.managed else None,
    )
