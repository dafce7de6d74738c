"""Events as shown: the history of one job or execution, and pages of the whole log.

Every reader that shows events (the API, the dashboard, the CLI) shows them through
``event_out``, so a stored event that no longer decodes (or cannot be shown) appears as
a placeholder with its topic and log position instead of failing the page.
"""

from collections.abc import Callable
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from jobledger.persistence.ledger import Ledger
from jobledger.persistence.undecodable import UndecodableEvent, error_text
from jobledger.schemas.events import EventOut, EventPage

__all__ = ["ArchivedHistory", "EventOut", "EventPage", "event_out", "history", "no_archive"]

# The events of an archived execution, marked archived; None if it was not archived.
ArchivedHistory = Callable[[UUID], list[EventOut] | None]


def no_archive(_execution_id: UUID) -> None:
    """Where no archive is wired: nothing was archived."""


def history(ledger: Ledger, kind: type[Aggregate], aggregate_id: UUID) -> list[EventOut]:
    """Every event of a job or an execution as shown, each with its log position; one
    that cannot be decoded as a placeholder (a NotFoundError for an id that is not a
    ``kind``)."""
    positions = ledger.positions(aggregate_id)
    return [
        event_out(e, position=positions.get(e.originator_version))
        for e in ledger.history_of(kind, aggregate_id)
    ]


def event_out(domain_event: Any, position: int | None = None) -> EventOut:  # noqa: ANN401 (any event)
    """The event as shown; a placeholder for one that cannot be decoded or shown."""
    if isinstance(domain_event, UndecodableEvent):
        return _placeholder_out(domain_event, position)
    try:
        return _event_out(domain_event, position)
    except (TypeError, ValueError, msgspec.EncodeError) as error:
        return _placeholder_out(_undecodable(domain_event, error), position)


def _event_out(domain_event: Any, position: int | None) -> EventOut:  # noqa: ANN401 (any event)
    skip = {"originator_id", "originator_version", "originator_topic", "timestamp"}
    data = {k: v for k, v in vars(domain_event).items() if k not in skip}
    return EventOut(
        type=type(domain_event).__qualname__.replace(".", ""),
        aggregate_id=domain_event.originator_id,
        version=domain_event.originator_version,
        timestamp=domain_event.timestamp,
        data=msgspec.to_builtins(data),
        position=position,
    )


def _undecodable(domain_event: Any, error: Exception) -> UndecodableEvent:  # noqa: ANN401 (any event)
    return UndecodableEvent(
        originator_id=domain_event.originator_id,
        originator_version=domain_event.originator_version,
        topic=get_topic(type(domain_event)),
        error=error_text(error),
    )


def _placeholder_out(placeholder: UndecodableEvent, position: int | None) -> EventOut:
    return EventOut(
        type=placeholder.type,
        aggregate_id=placeholder.originator_id,
        version=placeholder.originator_version,
        timestamp=None,
        data={"topic": placeholder.topic},
        position=placeholder.position if position is None else position,
        undecodable=True,
        error=placeholder.error,
    )
