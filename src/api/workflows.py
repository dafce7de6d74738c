"""Workflows: start an ad-hoc DAG of handler runs, list them, read one with each step's
state, cancel it, and its history."""

from typing import Any
from uuid import UUID

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from jobledger.api.budgets import RunBudget
from jobledger.api.common import (
    Cursor,
    Filter,
    IdempotencyKey,
    Limit,
    Offset,
    Since,
    Until,
    aware,
    events_page,
)
from jobledger.api.schemas import ReasonIn, WorkflowIn, WorkflowOut, to_steps, workflow_out
from jobledger.api.security import OPERATOR, VIEWER
from jobledger.domain.clock import Clock
from jobledger.services.actors import Actor
from jobledger.services.history import EventOut
from jobledger.services.views import Page, Views
from jobledger.services.workflows import Workflows


class WorkflowController(Controller):
    path = "/api/v1/workflows"
    tags = ["workflows"]  # noqa: RUF012 (Litestar reads a class attribute)

    @post("/", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def start_workflow(
        self,
        data: JSONBody[WorkflowIn],
        *,
        idempotency_key: IdempotencyKey,
        workflows: NamedDependency[Workflows],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        run_budget: NamedDependency[RunBudget],
    ) -> WorkflowOut:
        """Start a DAG of steps; the steps that wait for nothing are enqueued at once,
        each other step when the steps it waits for completed. The same
        Idempotency-Key returns the first workflow."""
        steps = to_steps(data)
        run_budget.take(len(steps))  # each step is a run, now or once it may start
        workflow = workflows.start(
            name=data.name,
            steps=steps,
            on_failure=data.on_failure,
            key=idempotency_key,
            at=clock(),
            by=actor,
        )
        return workflow_out(workflow)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_workflows(
        self,
        views: NamedDependency[Views],
        *,
        status: Filter = None,
        name: Filter = None,
        since: Since = None,
        until: Until = None,
        limit: Limit = 50,
        offset: Offset = 0,
        cursor: Cursor = None,
    ) -> Page:
        """Workflows started in [``since``, ``until``), the latest first, each with its
        steps counted by state (items are workflow rows); ``status`` is running,
        completed, failed or cancelled, ``name`` the whole name."""
        return views.workflows(
            status=status,
            name=name,
            since=aware("since", since),
            until=aware("until", until),
            limit=limit,
            offset=offset,
            cursor=cursor,
        )

    @get("/{workflow_id:uuid}", opt=VIEWER, sync_to_thread=True)
    def get_workflow(
        self, workflow_id: FromPath[UUID], workflows: NamedDependency[Workflows]
    ) -> WorkflowOut:
        return workflow_out(workflows.get(workflow_id))

    @post("/{workflow_id:uuid}/cancel", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def cancel_workflow(
        self,
        workflow_id: FromPath[UUID],
        workflows: NamedDependency[Workflows],
        actor: NamedDependency[Actor],
        data: JSONBody[ReasonIn | None] = None,
    ) -> WorkflowOut:
        """Cancel the workflow: waiting steps are skipped, open runs cancelled."""
        reason = data.reason if data is not None else ""
        return workflow_out(workflows.cancel(workflow_id, by=actor, reason=reason))

    @get("/{workflow_id:uuid}/events", opt=VIEWER, sync_to_thread=True)
    def workflow_events(
        self,
        request: Request[Any, Any, Any],
        workflow_id: FromPath[UUID],
        workflows: NamedDependency[Workflows],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[EventOut]]:
        """The workflow's events in order, a page at a time: the ``Link`` header names
        the next."""
        return events_page(request, workflows.history(workflow_id), limit=limit, cursor=cursor)
