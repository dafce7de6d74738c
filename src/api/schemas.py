"""The request and response bodies of the REST API, and their mapping to the domain.

The bodies themselves are defined once in ``jobledger.schemas`` (the client decodes
the same classes), and mapped to the domain's value objects in
``jobledger.services.bodies``; this module answers with them.
"""

from datetime import datetime

import msgspec

from jobledger.domain.job import Job
from jobledger.domain.workflow import Workflow
from jobledger.schemas.executions import BulkDiscardIn, BulkRequeueIn, BulkRunsIn
from jobledger.schemas.fields import NO_NUL, Short, Strict, strict_bodies
from jobledger.schemas.jobs import (
    BackfillIn,
    BackfillReport,
    CronIn,
    DependenciesOut,
    DependencyIn,
    ExecutionIn,
    Fire,
    IntervalIn,
    JobIn,
    JobLink,
    JobOut,
    JobPatch,
    ManualIn,
    OnceIn,
    PreviewIn,
    PreviewOut,
    ReasonIn,
    RetryIn,
    RulesIn,
    ScheduleIn,
)
from jobledger.schemas.workflows import StepIn, StepOut, WorkflowIn, WorkflowOut
from jobledger.services.bodies import (
    from_definition,
    to_definition,
    to_ready_at,
    to_run_spec,
    to_schedule,
    to_spec,
    to_steps,
    to_unique,
)

__all__ = [
    "NO_NUL",
    "BackfillIn",
    "BackfillReport",
    "BulkDiscardIn",
    "BulkRequeueIn",
    "BulkRunsIn",
    "CronIn",
    "DependenciesOut",
    "DependencyIn",
    "ExecutionIn",
    "Fire",
    "IntervalIn",
    "JobIn",
    "JobLink",
    "JobOut",
    "JobPatch",
    "ManualIn",
    "OnceIn",
    "PreviewIn",
    "PreviewOut",
    "ReasonIn",
    "RetryIn",
    "RulesIn",
    "ScheduleIn",
    "Short",
    "StepIn",
    "StepOut",
    "Strict",
    "WorkflowIn",
    "WorkflowOut",
    "from_definition",
    "job_out",
    "job_status",
    "patched",
    "strict_bodies",
    "to_definition",
    "to_ready_at",
    "to_run_spec",
    "to_schedule",
    "to_spec",
    "to_steps",
    "to_unique",
    "workflow_out",
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
        scope=job.scope if job.managed else None,
    )


def workflow_out(workflow: Workflow) -> WorkflowOut:
    steps = [
        StepOut(
            name=name,
            handler=spec.spec.handler,
            after=list(spec.after),
            status=str(workflow.states[name]),
            execution_id=workflow.execution_id(name),
            result=workflow.results.get(name),
            error=workflow.errors.get(name),
        )
        for name, spec in workflow.steps.items()
    ]
    return WorkflowOut(
        id=workflow.id,
        name=workflow.name,
        status=str(workflow.status),
        on_failure=workflow.on_failure,
        version=workflow.version,
        created_at=workflow.created_on,
        updated_at=workflow.modified_on,
        steps=steps,
    )
