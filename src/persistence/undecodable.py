"""Stored events that no longer decode, as placeholders a reader can show.

The followers quarantine such an event (ADR "quarantined events"); a reader that
shows events (a history, the audit log) turns it into an ``UndecodableEvent`` instead
of failing, and rebuilding the aggregate it belongs to raises ``UndecodableEventError``.
"""

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent

from jobledger.domain.json_values import error_line

MAX_SHOWN_ERROR = 500  # characters of the decode error a placeholder carries


@dataclass(frozen=True, kw_only=True)
class UndecodableEvent:
    """Where an event that cannot be decoded sits in the log, and why it cannot."""

    originator_id: UUID
    originator_version: int
    topic: str
    error: str
    position: int | None = None

    @property
    def type(self) -> str:
        """The event's type as decoded events spell it: ``Execution.Enqueued`` is
        ``ExecutionEnqueued``."""
        return self.topic.rpartition(":")[2].replace(".", "")


def error_text(error: BaseException) -> str:
    """The error in one line, without NUL, at most ``MAX_SHOWN_ERROR`` characters."""
    return error_line(error, max_chars=MAX_SHOWN_ERROR, mark="…")


def decode_or_placeholder(
    mapper: Mapper[UUID], stored: StoredEvent, position: int | None = None
) -> Any:  # noqa: ANN401 (any domain event, or the placeholder)
    """The domain event of ``stored``, or an ``UndecodableEvent`` if it cannot be had."""
    try:
        return mapper.to_domain_event(stored)
    except Exception as error:  # noqa: BLE001 (any decode failure: an old shape, an unknown topic, a cipher)
        return UndecodableEvent(
            originator_id=UUID(str(stored.originator_id)),
            originator_version=stored.originator_version,
            topic=stored.topic,
            error=error_text(error),
            position=position,
        )
