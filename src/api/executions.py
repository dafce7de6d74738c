"""Executions: ad-hoc runs, lists and details with every attempt, cancellation; and the
dead-letter queue: list, requeue one or many, discard."""

import asyncio
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_202_ACCEPTED

from jobledger.api.budgets import RunBudget, credential_of, gate_of
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
    key_or_new,
    outcome_response,
    started_response,
)
from jobledger.api.errors import ApiError
from jobledger.api.schemas import (
    NO_NUL,
    BulkDiscardIn,
    BulkRequeueIn,
    BulkRunsIn,
    ReasonIn,
    to_ready_at,
    to_run_spec,
    to_unique,
)
from jobledger.api.security import OPERATOR, VIEWER
from jobledger.domain.clock import Clock
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.schemas.executions import ExecutionRef, RunBatchIn, RunBatchOut, RunIn
from jobledger.schemas.rows import DeadLetterGroup
from jobledger.services.actors import Actor
from jobledger.services.bulk_runs import BulkRuns, RunSelection
from jobledger.services.dead_letters import BulkReport, DeadLetterFilter, DeadLetters
from jobledger.services.executions import BatchRun, Executions
from jobledger.services.history import EventOut
from jobledger.services.queues import Queues
from jobledger.services.views import ExecutionDetail, Page, Views
from jobledger.services.waits import MAX_WAIT_SECONDS, ExecutionWaits

Wait = Annotated[
    float | None,
    QueryParameter(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description=f"wait up to this many seconds (at most {MAX_WAIT_SECONDS:g}) for the "
        "execution to finish",
    ),
]
Search = Annotated[
    str | None,
    QueryParameter(
        max_length=200,
        pattern=NO_NUL,
        description="part of a run's handler, input, result, last error or job name (any"
        " case), or the start of its id or its job's id",
    ),
]
Reason = Annotated[
    str, QueryParameter(max_length=2000, pattern=NO_NUL, description="why (recorded in the event)")
]


class ExecutionController(Controller):
    path = "/api/v1/executions"
    tags = ["executions"]  # noqa: RUF012 (Litestar reads a class attribute)

    @post(
        "/",
        opt=OPERATOR,
        sync_to_thread=True,
        status_code=HTTP_202_ACCEPTED,
        responses={200: ResponseSpec(ExecutionRef, description="a duplicate of a unique run")},
    )
    def run_execution(
        self,
        data: JSONBody[RunIn],
        *,
        idempotency_key: IdempotencyKey,
        executions: NamedDependency[Executions],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        run_budget: NamedDependency[RunBudget],
        queues: NamedDependency[Queues],
    ) -> Response[ExecutionRef]:
        """Run a handler outside any job, now or later (``run_at``, ``delay_seconds``);
        the same Idempotency-Key returns the first run instead of starting another. With
        ``unique``, a run another run's key holds answers 200 with that run and
        ``duplicate: true`` (after replacing or debouncing it, if asked). ``warnings``
        says if no live worker leases from the run's queue (the run waits for one)."""
        key = key_or_new(idempotency_key)
        now = clock()
        spec, ready_at = to_run_spec(data), to_ready_at(data, now)
        run_budget.take(1)
        if data.unique is None:
            execution = executions.run(spec, key=key, at=now, by=actor, ready_at=ready_at)
            return started_response(execution, queues, now)
        unique = to_unique(data.unique)
        return outcome_response(
            executions.run_unique(spec, unique, key=key, at=now, by=actor, ready_at=ready_at),
            queues,
            now,
        )

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_executions(
        self,
        views: NamedDependency[Views],
        *,
        status: Filter = None,
        job_id: FromQuery[UUID | None] = None,
        queue: Filter = None,
        handler: Filter = None,
        since: Since = None,
        until: Until = None,
        search: Search = None,
        limit: Limit = 50,
        offset: Offset = 0,
        cursor: Cursor = None,
    ) -> Page:
        """Executions, the latest enqueued first. ``search`` finds runs by part of their
        handler, input, result, last error or job name (any case), or by the start of
        their id or their job's id."""
        return views.executions(
            status=status,
            job_id=job_id,
            queue=queue,
            handler=handler,
            since=aware("since", since),
            until=aware("until", until),
            search=search,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )

    @get("/{execution_id:uuid}", opt=VIEWER)
    async def get_execution(
        self,
        request: Request[Any, Any, Any],
        execution_id: FromPath[UUID],
        views: NamedDependency[Views],
        waits: NamedDependency[ExecutionWaits],
        wait: Wait = None,
    ) -> ExecutionDetail:
        """One execution with its attempts. With ``wait``, the answer comes when the
        execution finishes (completed, dead-lettered, cancelled or discarded) or after
        that many seconds, whichever is first: a long-poll that holds no thread."""
        if wait:
            async with gate_of(request).long_poll(credential_of(request), wait):
                return await waits.detail(execution_id, wait=wait)
        return await asyncio.to_thread(views.execution_detail, execution_id)

    @get("/{execution_id:uuid}/events", opt=VIEWER, sync_to_thread=True)
    def execution_events(
        self,
        request: Request[Any, Any, Any],
        execution_id: FromPath[UUID],
        executions: NamedDependency[Executions],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[EventOut]]:
        """The run's events in order, a page at a time: the ``Link`` header names the
        next."""
        return events_page(request, executions.history(execution_id), limit=limit, cursor=cursor)

    @post("/{execution_id:uuid}/cancel", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def cancel_execution(
        self,
        execution_id: FromPath[UUID],
        executions: NamedDependency[Executions],
        actor: NamedDependency[Actor],
        data: JSONBody[ReasonIn | None] = None,
    ) -> ExecutionRef:
        """Cancel a pending or running execution; a running handler is told to stop."""
        reason = data.reason if data else ""
        execution = executions.cancel(execution_id, by=actor, reason=reason)
        return ExecutionRef(execution.id, str(execution.status))

    @post("/cancel", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def cancel_many(
        self,
        data: JSONBody[BulkRunsIn],
        bulk_runs: NamedDependency[BulkRuns],
        actor: NamedDependency[Actor],
    ) -> BulkReport:
        """Cancel the runs named in ``ids``, or every run the filter matches (at most
        10,000 a request), that has not ended; ``dry_run`` only counts them. Running
        handlers are told to stop."""
        return bulk_runs.cancel(_runs(data), by=actor, reason=data.reason, dry_run=data.dry_run)

    @post("/retry", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def retry_many(
        self,
        data: JSONBody[BulkRunsIn],
        bulk_runs: NamedDependency[BulkRuns],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> BulkReport:
        """Retry now: the selected pending runs that wait for a later time (a back-off,
        a snooze, a deferral, their run_at) become due at once, their attempts as they
        are; ``dry_run`` only counts the selected runs."""
        return bulk_runs.bring_forward(
            _runs(data), by=actor, reason=data.reason, at=clock(), dry_run=data.dry_run
        )


class DeadLetterController(Controller):
    path = "/api/v1/dlq"
    tags = ["dead letters"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/groups", opt=VIEWER, sync_to_thread=True)
    def dead_letter_groups(
        self, dead_letters: NamedDependency[DeadLetters], *, limit: Limit = 100
    ) -> list[DeadLetterGroup]:
        """Dead letters grouped by job, handler and last error (count, first and last
        seen), the largest group first: requeue or discard one with
        ``POST /api/v1/dlq/requeue`` or ``/discard`` and its fields as the filter."""
        return dead_letters.groups(limit=limit)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_dead_letters(
        self,
        dead_letters: NamedDependency[DeadLetters],
        *,
        queue: Filter = None,
        handler: Filter = None,
        job_id: FromQuery[UUID | None] = None,
        error_contains: Annotated[
            str | None, QueryParameter(max_length=2000, pattern=NO_NUL)
        ] = None,
        search: Search = None,
        limit: Limit = 50,
        offset: Offset = 0,
        cursor: Cursor = None,
    ) -> Page:
        """Dead letters, the latest to die first; ``search`` as for the executions."""
        selection = DeadLetterFilter(
            queue=queue,
            handler=handler,
            job_id=job_id,
            error_contains=error_contains,
            search=search,
        )
        return dead_letters.page(selection, limit=limit, offset=offset, cursor=cursor)

    @post(
        "/{execution_id:uuid}/requeue", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK
    )
    def requeue_one(
        self,
        execution_id: FromPath[UUID],
        dead_letters: NamedDependency[DeadLetters],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        data: JSONBody[ReasonIn | None] = None,
    ) -> BulkReport:
        reason = data.reason if data else ""
        return dead_letters.requeue_one(execution_id, by=actor, reason=reason, at=clock())

    @post("/requeue", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def requeue_many(
        self,
        data: JSONBody[BulkRequeueIn],
        dead_letters: NamedDependency[DeadLetters],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> BulkReport:
        """Requeue every dead letter that matches; ``dry_run`` only counts them."""
        return dead_letters.requeue(
            dead_letters.matching(_selection(data)),
            by=actor,
            reason=data.reason,
            at=clock(),
            error_contains=data.error_contains,
            dry_run=data.dry_run,
        )

    @post("/discard", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def discard_many(
        self,
        data: JSONBody[BulkDiscardIn],
        dead_letters: NamedDependency[DeadLetters],
        actor: NamedDependency[Actor],
    ) -> BulkReport:
        """Give up for good on every dead letter that matches (a group: its job, handler
        and error); ``dry_run`` only counts them. The log keeps their history."""
        return dead_letters.discard(
            dead_letters.matching(_selection(data)),
            by=actor,
            reason=data.reason,
            error_contains=data.error_contains,
            dry_run=data.dry_run,
        )

    @delete("/{execution_id:uuid}", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def discard(
        self,
        execution_id: FromPath[UUID],
        dead_letters: NamedDependency[DeadLetters],
        actor: NamedDependency[Actor],
        reason: Reason = "",
    ) -> BulkReport:
        """Give up on a dead letter for good; the log keeps its history."""
        return dead_letters.discard_one(execution_id, by=actor, reason=reason)


def _runs(data: BulkRunsIn) -> RunSelection:
    return RunSelection(
        ids=tuple(data.ids),
        status=data.status,
        job_id=data.job_id,
        queue=data.queue,
        handler=data.handler,
        since=data.since,
        until=data.until,
        search=data.search,
    )


def _selection(data: BulkRequeueIn) -> DeadLetterFilter:
    return DeadLetterFilter(
        queue=data.queue,
        handler=data.handler,
        job_id=data.job_id,
        error_contains=data.error_contains,
        search=data.search,
    )


@post(
    "/api/v1/executions:batch",
    opt=OPERATOR,
    sync_to_thread=True,
    status_code=HTTP_202_ACCEPTED,
    tags=["executions"],
)
def run_batch(
    data: JSONBody[RunBatchIn],
    *,
    idempotency_key: IdempotencyKey,
    executions: NamedDependency[Executions],
    actor: NamedDependency[Actor],
    clock: NamedDependency[Clock],
    run_budget: NamedDependency[RunBudget],
    queues: NamedDependency[Queues],
) -> RunBatchOut:
    """Run up to 1,000 handlers outside any job in one transaction: all of them, or
    none if one is refused (the error names it as ``runs[i]``). A run's key is its own
    ``key``, or the batch's Idempotency-Key and its index, so the batch sent again
    returns the runs it made instead of starting more. ``warnings`` names each queue of
    the batch no live worker leases from."""
    base = key_or_new(idempotency_key)
    now = clock()
    for index, run in enumerate(data.runs):
        if run.unique is not None:
            raise ApiError(
                422,
                "a batch takes no unique runs",
                field=f"runs[{index}].unique",
                fix="send runs with a unique key one at a time to POST /api/v1/executions",
            )
    runs = [
        BatchRun(to_run_spec(run), run.key or f"{base}:{index}", _batch_ready_at(run, index, now))
        for index, run in enumerate(data.runs)
    ]
    run_budget.take(len(runs))
    outcome = executions.run_many(runs, by=actor)
    refs = outcome.executions
    warnings = queues.warnings([run.spec.queue for run in runs], at=now)
    return RunBatchOut(outcome.created, len(refs) - outcome.created, refs, warnings)


def _batch_ready_at(body: RunIn, index: int, now: datetime) -> datetime:
    try:
        return to_ready_at(body, now)
    except InvalidDefinitionError as error:
        raise InvalidDefinitionError(
            f"runs[{index}].{error.field}", error.problem, error.fix
        ) from None
