"""The log as server-sent events: ``GET /api/v1/events/stream``, resumable by position,
filtered by type, job and queue (see ``services.event_stream``)."""

from collections.abc import AsyncIterator
from typing import Annotated, Any
from uuid import UUID

import anyio
import msgspec
from litestar import Request, get
from litestar.di import NamedDependency
from litestar.params import FromQuery, HeaderParameter, QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from jobledger.api.budgets import credential_of, gate_of
from jobledger.api.common import Filter
from jobledger.api.errors import ApiError
from jobledger.api.schemas import NO_NUL
from jobledger.api.security import VIEWER, still_signed_in
from jobledger.api.system import parse_types
from jobledger.services.event_stream import EventStream, StreamFilter

# How long one stream lasts before the server ends it; the client reconnects from the
# last position it saw (``Last-Event-ID``), which an EventSource does by itself.
STREAM_SECONDS = 300.0
# What an EventSource waits before it reconnects, in ms.
RECONNECT_MS = 1000

After = Annotated[
    int | None,
    QueryParameter(ge=0, description="the log position to stream after (default: now)"),
]
Types = Annotated[
    str | None,
    QueryParameter(max_length=2000, pattern=NO_NUL, description="comma-separated event types"),
]
LastEventId = Annotated[
    str | None,
    HeaderParameter(
        name="Last-Event-ID",
        max_length=20,
        description="the last position received; wins over ``after``",
    ),
]


@get("/api/v1/events/stream", opt=VIEWER, tags=["events"], media_type="text/event-stream")
async def stream_events(
    request: Request[Any, Any, Any],
    event_stream: NamedDependency[EventStream],
    *,
    after: After = None,
    types: Types = None,
    job_id: FromQuery[UUID | None] = None,
    queue: Filter = None,
    last_event_id: LastEventId = None,
) -> ServerSentEvent:
    """The log's events as they come, as server-sent events: ``id`` is the event's log
    position, ``event`` its type, ``data`` the event as ``/audit/events`` shows it.
    From ``after`` (or ``Last-Event-ID``; else from now); filtered by ``types``, by
    ``job_id`` (the job's events and its runs') and by ``queue`` (its runs' and its
    own). A comment every 15 s keeps a quiet stream open; a stream ends after five
    minutes and the client resumes from its last id, and within 5 s of its session or
    token ending. Each open stream holds one of the credential's long-polls."""
    start = _resumed(last_event_id)
    if start is None:
        start = after if after is not None else await event_stream.head()
    wanted = StreamFilter(parse_types(types), job_id, queue)
    held = gate_of(request).long_poll(credential_of(request), STREAM_SECONDS)
    await held.__aenter__()  # a credential over its long-polls is refused before the 200

    async def messages() -> AsyncIterator[ServerSentEventMessage]:
        try:
            following = event_stream.follow(
                start, wanted, most_seconds=STREAM_SECONDS, allowed=still_signed_in(request)
            )
            async for event in following:
                if event is None:
                    yield ServerSentEventMessage(comment="keep-alive")
                else:
                    data = msgspec.json.encode(event).decode()
                    yield ServerSentEventMessage(data=data, event=event.type, id=event.position)
        finally:
            # Shielded: a client that goes away cancels the response's task group,
            # which would cancel the release too and keep the long-poll till its end.
            with anyio.CancelScope(shield=True):
                await held.__aexit__(None, None, None)

    return ServerSentEvent(messages(), retry_duration=RECONNECT_MS)


def _resumed(last_event_id: str | None) -> int | None:
    if last_event_id is None or not last_event_id.strip():
        return None
    try:
        position = int(last_event_id)
    except ValueError:
        position = -1
    if position < 0:
        raise ApiError(
            400,
            f"Last-Event-ID {last_event_id!r} is not a log position",
            field="Last-Event-ID",
            fix="send the id of the last event received (a whole number), or none",
        )
    return position
