"""Executions: run a handler ad hoc, cancel it, read it and its history (its attempts
as the read models show them: ``Views.execution_detail``)."""

from datetime import datetime
from uuid import UUID

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import ConflictError
from jobledger.domain.execution import Execution, Trigger
from jobledger.persistence.ledger import Ledger
from jobledger.runtime.accounts import Role
from jobledger.services.actors import Actor
from jobledger.services.errors import KeyReusedError
from jobledger.services.history import EventOut, history
from jobledger.services.jobs import ANY_HANDLER, HandlerNames


class Executions:
    """The execution use cases; changes are direct saves, like the jobs'."""

    def __init__(self, ledger: Ledger, handlers: HandlerNames = ANY_HANDLER) -> None:
        self.ledger = ledger
        self.handlers = handlers

    def run(
        self,
        spec: ExecutionSpec,
        *,
        key: str,
        at: datetime,
        by: Actor,
        ready_at: datetime | None = None,
    ) -> Execution:
        """Enqueue a handler run that belongs to no job, due at ``ready_at`` (default
        ``at``: now). The same key returns the first run; the same key for a different
        run is refused."""
        by.require(Role.OPERATOR)
        self.handlers.check(spec.handler, spec.payload)
        spec.check(self.ledger.limits)
        execution = Execution.enqueue(
            spec=spec, ready_at=ready_at or at, trigger=Trigger.ADHOC, trigger_key=key
        )
        try:
            self.ledger.save_all(execution)
        except ConflictError:
            execution = self.ledger.get_execution(execution.id)
        if execution.spec != spec:
            raise KeyReusedError(
                "this Idempotency-Key was already used for a different execution",
                field="Idempotency-Key",
                fix="use a new key for a new request",
            )
        return execution

    def cancel(self, execution_id: UUID, *, by: Actor, reason: str = "") -> Execution:
        """Cancel a pending or running execution; a running handler is told to stop."""
        by.require(Role.OPERATOR)
        execution = self.ledger.get_execution(execution_id)
        execution.cancel(by=by.name, reason=reason)
        self.ledger.save_all(execution)
        return execution

    def get(self, execution_id: UUID) -> Execution:
        """The execution as the log has it now."""
        return self.ledger.get_execution(execution_id)

    def history(self, execution_id: UUID) -> list[EventOut]:
        return history(self.ledger, Execution, execution_id)
