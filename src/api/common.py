"""Parameters and checks that several route modules share."""

import uuid
from datetime import datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from litestar import Request, Response
from litestar.params import HeaderParameter, QueryParameter

from jobledger.api.errors import ApiError
from jobledger.api.schemas import NO_NUL
from jobledger.domain.execution import Execution
from jobledger.schemas.events import EventOut
from jobledger.schemas.executions import ExecutionRef
from jobledger.services.pages import Order, paged
from jobledger.services.queues import Queues
from jobledger.services.unique_runs import Duplicate, RunOutcome, Started

T = TypeVar("T")

Limit = Annotated[int, QueryParameter(ge=1, le=500, description="page size")]
Offset = Annotated[int, QueryParameter(ge=0, le=10_000_000, description="rows to skip")]
Cursor = Annotated[
    str | None,
    QueryParameter(
        max_length=2000,
        pattern="^[A-Za-z0-9_-]*$",
        description="the next_cursor of the page before: the page after it (without offset)",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        min_length=1,
        max_length=200,
        pattern=NO_NUL,
        required=False,
        description="repeat a request with the same key to get the first result again",
    ),
]
Filter = Annotated[str | None, QueryParameter(max_length=200, pattern=NO_NUL)]
Since = Annotated[datetime | None, QueryParameter(description="from this time (ISO 8601)")]
Until = Annotated[datetime | None, QueryParameter(description="up to this time (ISO 8601)")]


def linked(
    request: Request[Any, Any, Any],
    items: list[T],
    order: Order[T],
    *,
    limit: int,
    cursor: str | None,
) -> Response[list[T]]:
    """A page of a list the API has always answered as an array: the array, and the
    next page (when there is one) in a ``Link: <...>; rel="next"`` header (RFC 8288)
    whose query is this one with that page's ``cursor``."""
    page, following = paged(items, order, limit=limit, cursor=cursor)
    if following is None:
        return Response(page)
    query = {**dict(request.query_params.items()), "cursor": following}
    return Response(page, headers={"Link": f'<{request.url.path}?{urlencode(query)}>; rel="next"'})


def events_page(
    request: Request[Any, Any, Any], events: list[EventOut], *, limit: int, cursor: str | None
) -> Response[list[EventOut]]:
    """A page of one aggregate's events, in version order."""
    return linked(request, events, EVENTS, limit=limit, cursor=cursor)


EVENTS = Order[EventOut]("events", lambda event: (event.version,))


def key_or_new(key: str | None) -> str:
    return key if key is not None else uuid.uuid4().hex


def aware(name: str, value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ApiError(
            400,
            f"{name}: {value.isoformat()} has no UTC offset",
            field=name,
            fix="add an offset, e.g. 2026-11-29T10:00:00Z",
        )
    return value


def started_response(execution: Execution, queues: Queues, at: datetime) -> Response[ExecutionRef]:
    """202 with the run a request started, warning if no worker serves its queue."""
    return outcome_response(Started(execution), queues, at)


def outcome_response(outcome: RunOutcome, queues: Queues, at: datetime) -> Response[ExecutionRef]:
    """202 with a run a request started; 200 with the run that holds its unique key;
    either warns if no worker serves the run's queue."""
    execution = outcome.execution
    warnings = queues.warnings([execution.spec.queue], at=at)
    ref = ExecutionRef(execution.id, str(execution.status), warnings=warnings)
    match outcome:
        case Started():
            return Response(ref, status_code=202)
        case Duplicate():
            ref.duplicate = True
            return Response(ref, status_code=200)
