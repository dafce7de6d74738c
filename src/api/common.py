"""Parameters and checks that several route modules share."""

import uuid
from datetime import datetime
from typing import Annotated, Any

from eventsourcing.domain import Aggregate
from litestar import Request
from litestar.params import HeaderParameter, QueryParameter

from jobledger.api.errors import ApiError
from jobledger.api.schemas import NO_NUL, EventOut, event_out
from jobledger.api.security import api_state
from jobledger.api.state import ApiState
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.ledger import Ledger
from jobledger.projections.log import stream_positions
from jobledger.runtime.handlers.registry import unknown_handler_fix

Limit = Annotated[int, QueryParameter(ge=1, le=500, description="page size")]
Offset = Annotated[int, QueryParameter(ge=0, le=10_000_000, description="rows to skip")]
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


def state_of(request: Request[Any, Any, Any]) -> ApiState:
    return api_state(request)


def key_or_new(key: str | None) -> str:
    return key if key is not None else uuid.uuid4().hex


def check_handler(state: ApiState, handler: str) -> None:
    """A handler no worker knows would only fail into the DLQ later: refuse it now."""
    if handler not in state.handler_names:
        raise InvalidDefinitionError(
            "handler",
            f"{handler!r} is not a registered handler",
            unknown_handler_fix(handler, state.handler_names),
        )


def aware(name: str, value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ApiError(
            400,
            f"{name}: {value.isoformat()} has no UTC offset",
            field=name,
            fix="add an offset, e.g. 2026-11-29T10:00:00Z",
        )
    return value


def history_out(ledger: Ledger, kind: type[Aggregate], aggregate_id: uuid.UUID) -> list[EventOut]:
    """Every event of a job or an execution as shown, each with its log position; one
    that cannot be decoded as a placeholder (a 404 for an id that is not a ``kind``)."""
    positions = stream_positions(ledger.recorder, aggregate_id)
    return [
        event_out(e, position=positions.get(e.originator_version))
        for e in ledger.history_of(kind, aggregate_id)
    ]
