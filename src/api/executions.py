"""Executions: ad-hoc runs, lists and details with every attempt, cancellation; and the
dead-letter queue: list, requeue one or many, discard."""

from typing import Annotated, Any
from uuid import UUID

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_202_ACCEPTED

from jobledger.api.common import (
    Filter,
    IdempotencyKey,
    Limit,
    Offset,
    Since,
    Until,
    aware,
    check_handler,
    history_out,
    key_or_new,
    state_of,
)
from jobledger.api.errors import ApiError
from jobledger.api.jobs import ExecutionRef
from jobledger.api.schemas import (
    NO_NUL,
    BulkReport,
    BulkRequeueIn,
    EventOut,
    ExecutionIn,
    ReasonIn,
    to_spec,
)
from jobledger.api.security import OPERATOR, VIEWER, actor
from jobledger.api.state import ApiState
from jobledger.domain.execution import Execution
from jobledger.projections import read_queries
from jobledger.projections.read_queries import AttemptRow, ExecutionRow, Page
from jobledger.runtime.dead_letters import (
    DeadLetterReport,
    discard_dead_letters,
    requeue_dead_letters,
)

Reason = Annotated[
    str, QueryParameter(max_length=2000, pattern=NO_NUL, description="why (recorded in the event)")
]


class ExecutionDetail(msgspec.Struct):
    execution: ExecutionRow
    attempts: list[AttemptRow]


class ExecutionController(Controller):
    path = "/api/v1/executions"
    tags = ["executions"]  # noqa: RUF012 (Litestar reads a class attribute)

    @post("/", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_202_ACCEPTED)
    def run_execution(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[ExecutionIn],
        idempotency_key: IdempotencyKey,
    ) -> ExecutionRef:
        """Run a handler now, outside any job; the same Idempotency-Key returns the
        first run instead of starting another."""
        state = state_of(request)
        check_handler(state, data.handler)
        spec = to_spec(data)
        execution = state.container.ledger.run_adhoc(
            spec, key=key_or_new(idempotency_key), at=state.now()
        )
        if execution.spec != spec:
            raise ApiError(
                409,
                "this Idempotency-Key was already used for a different execution",
                field="Idempotency-Key",
                fix="use a new key for a new request",
            )
        return ExecutionRef(execution.id, str(execution.status))

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_executions(
        self,
        request: Request[Any, Any, Any],
        *,
        status: Filter = None,
        job_id: FromQuery[UUID | None] = None,
        queue: Filter = None,
        handler: Filter = None,
        since: Since = None,
        until: Until = None,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page:
        return read_queries.list_executions(
            state_of(request).database,
            status=status,
            job_id=job_id,
            queue=queue,
            handler=handler,
            since=aware("since", since),
            until=aware("until", until),
            limit=limit,
            offset=offset,
        )

    @get("/{execution_id:uuid}", opt=VIEWER, sync_to_thread=True)
    def get_execution(
        self, request: Request[Any, Any, Any], execution_id: FromPath[UUID]
    ) -> ExecutionDetail:
        state = state_of(request)
        row = read_queries.get_execution(state.database, execution_id)
        if row is None:
            state.container.ledger.get_execution(execution_id)  # 404 if it does not exist
            raise ApiError(
                404,
                f"execution {execution_id} is not in the read model yet",
                fix="retry in a moment",
            )
        return ExecutionDetail(row, read_queries.list_attempts(state.database, execution_id))

    @get("/{execution_id:uuid}/events", opt=VIEWER, sync_to_thread=True)
    def execution_events(
        self, request: Request[Any, Any, Any], execution_id: FromPath[UUID]
    ) -> list[EventOut]:
        return history_out(state_of(request).container.ledger, Execution, execution_id)

    @post("/{execution_id:uuid}/cancel", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def cancel_execution(
        self,
        request: Request[Any, Any, Any],
        execution_id: FromPath[UUID],
        data: JSONBody[ReasonIn | None] = None,
    ) -> ExecutionRef:
        """Cancel a pending or running execution; a running handler is told to stop."""
        ledger = state_of(request).container.ledger
        execution = ledger.get_execution(execution_id)
        execution.cancel(by=actor(request), reason=data.reason if data else "")
        ledger.save_all(execution)
        return ExecutionRef(execution.id, str(execution.status))


class DeadLetterController(Controller):
    path = "/api/v1/dlq"
    tags = ["dead letters"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_dead_letters(
        self,
        request: Request[Any, Any, Any],
        *,
        queue: Filter = None,
        handler: Filter = None,
        job_id: FromQuery[UUID | None] = None,
        error_contains: Annotated[
            str | None, QueryParameter(max_length=2000, pattern=NO_NUL)
        ] = None,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page:
        return read_queries.list_dead_letters(
            state_of(request).database,
            queue=queue,
            handler=handler,
            job_id=job_id,
            error_contains=error_contains,
            limit=limit,
            offset=offset,
        )

    @post(
        "/{execution_id:uuid}/requeue", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK
    )
    def requeue_one(
        self,
        request: Request[Any, Any, Any],
        execution_id: FromPath[UUID],
        data: JSONBody[ReasonIn | None] = None,
    ) -> BulkReport:
        state = state_of(request)
        report = requeue_dead_letters(
            state.container.ledger,
            state.container.writer,
            [execution_id],
            by=actor(request),
            reason=data.reason if data else "",
            at=state.now(),
        )
        return _one(report, execution_id)

    @post("/requeue", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def requeue_many(
        self, request: Request[Any, Any, Any], data: JSONBody[BulkRequeueIn]
    ) -> BulkReport:
        """Requeue every dead letter that matches; ``dry_run`` only counts them."""
        state = state_of(request)
        report = requeue_dead_letters(
            state.container.ledger,
            state.container.writer,
            _matching(state, data),
            by=actor(request),
            reason=data.reason,
            at=state.now(),
            error_contains=data.error_contains,
            dry_run=data.dry_run,
        )
        return BulkReport(report.matched, report.changed, report.refused, report.dry_run)

    @delete("/{execution_id:uuid}", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def discard(
        self, request: Request[Any, Any, Any], execution_id: FromPath[UUID], reason: Reason = ""
    ) -> BulkReport:
        """Give up on a dead letter for good; the log keeps its history."""
        state = state_of(request)
        report = discard_dead_letters(
            state.container.ledger,
            state.container.writer,
            [execution_id],
            by=actor(request),
            reason=reason,
        )
        return _one(report, execution_id)


def _one(report: DeadLetterReport, execution_id: UUID) -> BulkReport:
    if report.refused:
        raise ApiError(409, f"execution {execution_id} is not dead-lettered (any more)")
    return BulkReport(report.matched, report.changed, report.refused, report.dry_run)


def _matching(state: ApiState, data: BulkRequeueIn) -> list[UUID]:
    ids: list[UUID] = []
    while True:
        page = read_queries.list_dead_letters(
            state.database,
            queue=data.queue,
            handler=data.handler,
            job_id=data.job_id,
            error_contains=data.error_contains,
            limit=500,
            offset=len(ids),
        )
        ids.extend(row.id for row in page.items)
        if len(page.items) < 500:  # noqa: PLR2004 (the page size above)
            return ids
