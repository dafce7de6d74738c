"""Workflows: start an ad-hoc DAG of steps, read it with each step's state, cancel it.

The steps' releases after the first happen in the scheduler's releases loop, as their
upstream runs end (``runtime/releases.py``); this service starts and ends workflows.
"""

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from jobledger.domain.errors import ConflictError, InvalidDefinitionError
from jobledger.domain.execution import Execution
from jobledger.domain.policies import OnFailure
from jobledger.domain.roles import Role
from jobledger.domain.workflow import StepSpec, Workflow, workflow_id_for_key
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.streams import load_many
from jobledger.services.actors import Actor
from jobledger.services.errors import KeyReusedError
from jobledger.services.history import EventOut, history
from jobledger.services.jobs import ANY_HANDLER, HandlerNames


class Workflows:
    """The workflow use cases; changes are direct saves, like the jobs'."""

    def __init__(self, ledger: Ledger, handlers: HandlerNames = ANY_HANDLER) -> None:
        self.ledger = ledger
        self.handlers = handlers

    def start(
        self,
        *,
        name: str,
        steps: Sequence[StepSpec],
        on_failure: OnFailure = OnFailure.STOP,
        key: str | None = None,
        at: datetime,
        by: Actor,
    ) -> Workflow:
        """Start a workflow; its steps that wait for nothing are enqueued with it. The
        same key returns the first workflow; the same key for other steps is refused."""
        by.require(Role.OPERATOR)
        for index, step in enumerate(steps):
            try:
                self.handlers.check(step.spec.handler, step.spec.payload, step.spec.queue)
            except InvalidDefinitionError as error:
                raise InvalidDefinitionError(
                    f"steps[{index}].{error.field}", error.problem, error.fix
                ) from None
        workflow, executions = Workflow.start(
            name=name,
            steps=steps,
            on_failure=on_failure,
            at=at,
            by=by.name,
            via=by.via,
            key=key,
            limits=self.ledger.limits,
        )
        try:
            self.ledger.save_all(workflow, *executions)
        except ConflictError:
            if key is None:
                raise
            existing = self.ledger.get_workflow(workflow_id_for_key(key))
            if list(existing.steps.values()) != list(steps) or existing.name != name:
                raise KeyReusedError(
                    "this Idempotency-Key was already used for a different workflow",
                    field="Idempotency-Key",
                    fix="use a new key for a new workflow",
                ) from None
            return existing
        return workflow

    def get(self, workflow_id: UUID) -> Workflow:
        return self.ledger.get_workflow(workflow_id)

    def runs(self, workflow: Workflow) -> dict[str, Execution]:
        """The runs of the workflow's released steps, by step name."""
        ids = {workflow.execution_id(name): name for name in workflow.steps}
        found = load_many(self.ledger, Execution, list(ids))
        return {ids[run_id]: run for run_id, run in found.items()}

    def cancel(self, workflow_id: UUID, *, by: Actor, reason: str = "") -> Workflow:
        """End the workflow: waiting steps are skipped, open runs cancelled (a running
        handler is told to stop), in one save."""
        by.require(Role.OPERATOR)
        workflow = self.ledger.get_workflow(workflow_id)
        open_steps = workflow.cancel(by=by.name, via=by.via, reason=reason)
        runs = self.runs(workflow)
        cancelled = []
        for step in open_steps:
            run = runs.get(step)
            if run is not None and not run.is_terminal:
                run.cancel(
                    by=by.name, via=by.via, reason=reason or f"workflow {workflow_id} cancelled"
                )
                cancelled.append(run)
        self.ledger.save_all(workflow, *cancelled)
        return workflow

    def history(self, workflow_id: UUID) -> list[EventOut]:
        return history(self.ledger, Workflow, workflow_id)
