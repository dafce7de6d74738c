"""Events as the history and audit views show them."""

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec


class EventOut(msgspec.Struct, kw_only=True):
    """One event of the log with its fields, for history and audit views."""

    type: str
    aggregate_id: UUID
    version: int
    timestamp: datetime | None  # None for an event that cannot be decoded
    data: dict[str, Any]
    position: int | None = None
    # The event is in the log but no longer decodes: data holds its topic, error why.
    undecodable: bool = False
    error: str | None = None
    # The event left the log for an archive file (retention); read back from there.
    archived: bool = False


class EventPage(msgspec.Struct):
    items: list[EventOut]
    next_after: int
    head: int
