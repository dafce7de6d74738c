"""Turning events into what the API shows: a placeholder rather than an error."""

import uuid
from datetime import UTC, datetime

from jobledger.domain.execution import Execution
from jobledger.persistence.undecodable import MAX_SHOWN_ERROR, UndecodableEvent, error_text
from jobledger.services.history import event_out


def test_an_event_whose_fields_cannot_be_shown_becomes_a_placeholder() -> None:
    """If a decoded event holds a value with no JSON form, then it is shown as an
    undecodable placeholder with its topic and the error, not raised."""
    event = object.__new__(Execution.Completed)
    fields = {
        "originator_id": uuid.uuid4(),
        "originator_version": 3,
        "timestamp": datetime.now(tz=UTC),
        "result": object(),
    }
    object.__setattr__(event, "__dict__", fields)
    shown = event_out(event, position=9)
    assert (shown.undecodable, shown.position, shown.version) == (True, 9, 3)
    assert (shown.type, shown.data) == (
        "ExecutionCompleted",
        {"topic": "jobledger:ExecutionCompleted"},
    )
    assert shown.error is not None
    assert shown.error.startswith("TypeError: ")


def test_a_placeholder_keeps_its_position_and_a_bounded_error() -> None:
    """If a placeholder knows its position, then it is shown with it, and its error
    (cut to MAX_SHOWN_ERROR characters where it was made) is kept as it is."""
    placeholder = UndecodableEvent(
        originator_id=uuid.uuid4(),
        originator_version=1,
        topic="jobledger:JobRenamed",
        error="x" * MAX_SHOWN_ERROR,
        position=4,
    )
    shown = event_out(placeholder)
    assert (shown.type, shown.position, shown.timestamp) == ("JobRenamed", 4, None)
    assert shown.error == placeholder.error


def test_a_shown_error_is_one_line_without_nul_and_bounded() -> None:
    """If a decode error is long, spans lines or holds NUL, then the placeholder's
    error is one line without NUL and at most MAX_SHOWN_ERROR characters."""
    text = error_text(ValueError("bad\nstate\x00" + "y" * 1000))
    assert text.startswith("ValueError: bad state\ufffd")
    assert len(text) == MAX_SHOWN_ERROR
    assert text.endswith("…")
