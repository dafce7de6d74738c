"""``client.workflows``: ad-hoc DAGs of steps, for ``Client`` and ``AsyncClient``.

::

    flow = client.workflows.create({"steps": [
        {"name": "extract", "handler": "etl.extract"},
        {"name": "load", "handler": "etl.load", "after": ["extract"]},
    ]})
    done = client.workflows.wait(flow, timeout=600)
    done.steps[1].result

A step's handler sees the results of the steps it waited for (``ctx.upstream_results``).
"""

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobledger.client import calls
from jobledger.client.calls import WorkflowId
from jobledger.schemas.events import EventOut
from jobledger.schemas.workflows import WorkflowIn, WorkflowOut

if TYPE_CHECKING:
    from jobledger.client.async_client import AsyncClient
    from jobledger.client.sync_client import Client


class Workflows:
    """The workflow calls of a ``Client``."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def create(
        self, workflow: WorkflowIn | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> WorkflowOut:
        """Start a workflow (a ``WorkflowIn``, or a dict of its fields); the steps that
        wait for nothing are enqueued at once. The same ``idempotency_key`` returns the
        first workflow."""
        return self._client.send(calls.create_workflow(workflow, idempotency_key))

    def get(self, workflow_id: WorkflowId) -> WorkflowOut:
        """The workflow with each step's state, run id and result."""
        return self._client.send(calls.get_workflow(workflow_id))

    def wait(self, workflow_id: WorkflowId, timeout: float | None = None) -> WorkflowOut:
        """The workflow once it completed. Raises WorkflowFailedError if it failed or
        was cancelled, WorkflowTimedOutError after ``timeout`` seconds (None: no limit)."""
        waiting = calls.WorkflowWaiting(workflow_id, timeout, time.monotonic)
        while True:
            workflow = self._client.send(waiting.call())
            pause = waiting.seen(workflow)
            if pause is None:
                return workflow
            time.sleep(pause)

    def cancel(self, workflow_id: WorkflowId, *, reason: str = "") -> WorkflowOut:
        """End the workflow: waiting steps are skipped, open runs cancelled."""
        return self._client.send(calls.cancel_workflow(workflow_id, reason))

    def history(self, workflow_id: WorkflowId) -> list[EventOut]:
        """Every event of the workflow, oldest first (read a page at a time)."""
        pages = self._client.iter_pages(calls.workflow_history(workflow_id))
        return [event for page in pages for event in page.items]


class AsyncWorkflows:
    """The workflow calls of an ``AsyncClient``."""

    def __init__(self, client: "AsyncClient") -> None:
        self._client = client

    async def create(
        self, workflow: WorkflowIn | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> WorkflowOut:
        """Start a workflow (a ``WorkflowIn``, or a dict of its fields); the steps that
        wait for nothing are enqueued at once. The same ``idempotency_key`` returns the
        first workflow."""
        return await self._client.send(calls.create_workflow(workflow, idempotency_key))

    async def get(self, workflow_id: WorkflowId) -> WorkflowOut:
        """The workflow with each step's state, run id and result."""
        return await self._client.send(calls.get_workflow(workflow_id))

    async def wait(
        self,
        workflow_id: WorkflowId,
        timeout: float | None = None,  # noqa: ASYNC109 (the wait's own bound, as in Client)
    ) -> WorkflowOut:
        """The workflow once it completed. Raises WorkflowFailedError if it failed or
        was cancelled, WorkflowTimedOutError after ``timeout`` seconds (None: no limit)."""
        waiting = calls.WorkflowWaiting(workflow_id, timeout, time.monotonic)
        while True:
            workflow = await self._client.send(waiting.call())
            pause = waiting.seen(workflow)
            if pause is None:
                return workflow
            await asyncio.sleep(pause)

    async def cancel(self, workflow_id: WorkflowId, *, reason: str = "") -> WorkflowOut:
        """End the workflow: waiting steps are skipped, open runs cancelled."""
        return await self._client.send(calls.cancel_workflow(workflow_id, reason))

    async def history(self, workflow_id: WorkflowId) -> list[EventOut]:
        """Every event of the workflow, oldest first (read a page at a time)."""
        pages = self._client.iter_pages(calls.workflow_history(workflow_id))
        return [event async for page in pages for event in page.items]
