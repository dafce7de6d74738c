"""Workflow bodies: an ad-hoc DAG of steps as the API takes it, and as it answers."""

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec

from jobledger.domain.policies import OnFailure
from jobledger.schemas.fields import Short, Strict, Tiny
from jobledger.schemas.jobs import ExecutionIn


class StepIn(ExecutionIn, kw_only=True):
    """One step of a workflow: a handler run, named, after the steps it waits for."""

    name: Tiny
    after: Annotated[list[Tiny], msgspec.Meta(max_length=50)] = msgspec.field(default_factory=list)


class WorkflowIn(Strict, kw_only=True):
    """An ad-hoc DAG: steps whose ``after`` name other steps; ``on_failure`` says
    whether a failed step stops the workflow or only what depends on it."""

    name: Short = "workflow"
    steps: Annotated[list[StepIn], msgspec.Meta(min_length=1, max_length=500)]
    on_failure: OnFailure = OnFailure.STOP


class StepOut(msgspec.Struct, kw_only=True):
    name: str
    handler: str
    after: list[str]
    status: str
    execution_id: UUID
    result: dict[str, Any] | None = None
    error: str | None = None


class WorkflowOut(msgspec.Struct, kw_only=True):
    id: UUID
    name: str
    status: str
    on_failure: OnFailure
    version: int
    created_at: datetime
    updated_at: datetime
    steps: list[StepOut]
