"""A run's log lines as the worker keeps them (ADR 104): each line bounded, each attempt
bounded, and the handler's loggers captured only inside its attempt."""

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.run_logs import (
    MAX_FIELDS_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    LogLine,
    LogPolicy,
    traceback_tail,
)
from jobledger.infra.logging import ATTEMPT_SINK, capture_attempt_lines
from jobledger.runtime.attempt_lines import AttemptLines

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def test_a_line_is_bounded_and_keeps_what_the_log_can_carry() -> None:
    """If a handler logs an odd level, a long message, a value the log cannot carry or
    too many fields, then the line says info, cuts the message, keeps that value as its
    text, and keeps oversized fields as one text."""
    line = LogLine.bounded(
        at=T0, level="NOTICE", message="x" * (MAX_MESSAGE_CHARS + 10), fields={"o": object()}
    )
    assert line.level == "info"
    assert len(line.message) == MAX_MESSAGE_CHARS
    assert line.message.endswith("…")
    assert line.fields["o"].startswith("<object object")
    big = LogLine.bounded(
        at=T0, level="Error", message="m", fields={"blob": "y" * MAX_FIELDS_BYTES}
    )
    assert big.level == "error"
    assert list(big.fields) == ["fields"]
    assert len(big.fields["fields"]) <= MAX_FIELDS_BYTES // 2


@given(st.text(max_size=2 * MAX_TRACEBACK_CHARS))
def test_a_traceback_keeps_its_end(text: str) -> None:
    """If a traceback is longer than the bound, then its last characters are kept (the
    error is at its end); a shorter one is kept whole."""
    kept = traceback_tail(text)
    if len(text) <= MAX_TRACEBACK_CHARS:
        assert kept == text
    else:
        assert kept == "…" + text[-MAX_TRACEBACK_CHARS:]


def test_an_attempt_keeps_lines_up_to_its_bound_and_counts_the_rest() -> None:
    """If more lines come than an attempt keeps (by count or by bytes), then the rest are
    counted as dropped; what the worker binds to every line is not kept; a take empties
    what is pending and the bound holds across takes."""
    clock = iter(T0 + timedelta(seconds=n) for n in range(100))
    lines = AttemptLines(LogPolicy(max_lines=3, max_bytes=10_000), lambda: next(clock))
    lines.write("info", "one", {"execution_id": "e", "attempt": 1, "k": 1})
    lines.write("info", "two", {})
    first, dropped = lines.take()
    assert [(line.message, line.fields) for line in first] == [("one", {"k": 1}), ("two", {})]
    assert (first[0].at, dropped) == (T0, 0)
    for n in range(4):
        lines.write("warning", f"more {n}", {})
    rest, dropped = lines.take()
    assert ([line.message for line in rest], dropped) == (["more 0"], 3)
    small = AttemptLines(LogPolicy(max_lines=100, max_bytes=10), lambda: T0)
    small.write("info", "0123456789abc", {})
    assert small.take() == ([], 1)


def test_a_traceback_field_is_cut_to_its_end() -> None:
    """If a line carries an exception longer than the bound, then its end is kept."""
    lines = AttemptLines(LogPolicy(), lambda: T0)
    lines.write("warning", "handler.raised", {"exception": "a" * MAX_TRACEBACK_CHARS + "Error: x"})
    [line], _ = lines.take()
    assert line.fields["exception"].endswith("Error: x")
    assert len(line.fields["exception"]) == MAX_TRACEBACK_CHARS + 1


def fail() -> None:
    raise ValueError("boom")


@pytest.fixture
def captured() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """The worker's capture installed, and a sink that collects; both undone after."""
    root = logging.getLogger()
    level, handlers, config = root.level, list(root.handlers), structlog.get_config()
    capture_attempt_lines()
    capture_attempt_lines()  # twice: installed once
    got: list[tuple[str, str, dict[str, Any]]] = []
    yield got
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)


def test_a_handlers_lines_reach_its_attempt_only(
    captured: list[tuple[str, str, dict[str, Any]]],
) -> None:
    """If a handler logs through structlog and the standard logging inside its attempt,
    then both reach the attempt's sink, redacted, with a traceback as text; the same
    calls outside an attempt reach no sink."""
    logger = structlog.get_logger("jobledger.handler")
    plain = logging.getLogger("jobledger.test")
    logger.info("outside", token="abc")
    plain.info("outside too")
    token = ATTEMPT_SINK.set(lambda *line: captured.append(line))
    try:
        logger.info("calling", password="hunter2", url="http://u:pw@host/x")
        plain.info("sent with Authorization: Bearer sekrit-token-1234")
        try:
            fail()
        except ValueError:
            plain.exception("failed")
    finally:
        ATTEMPT_SINK.reset(token)
    assert [(level, message) for level, message, _ in captured] == [
        ("info", "calling"),
        ("info", "sent with Authorization: Bearer ***"),
        ("error", "failed"),
    ]
    assert captured[0][2] == {"password": "***", "url": "http://u:***@host/x"}
    assert captured[1][2] == {"logger": "jobledger.test"}
    assert "ValueError: boom" in captured[2][2]["exception"]
    assert [h for h in logging.getLogger().handlers if type(h).__name__ == "_AttemptHandler"]
