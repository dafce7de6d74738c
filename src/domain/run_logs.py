"""The lines a handler logs while it runs, kept with the run (ADR 104).

A handler's ``ctx.log`` calls and its standard ``logging`` records are captured per
attempt and recorded on the run's own stream as ``ExecutionLogged`` events: about once a
second while it runs, and the rest with its outcome. So they are read with the run,
archived and deleted with it, and no projection reads them. An attempt keeps at most
``LogPolicy.max_lines`` lines and ``max_bytes`` of them; what comes after is counted,
not kept. A line is cut to a size a reader can use: its message to ``MAX_MESSAGE_CHARS``
and its fields to ``MAX_FIELDS_BYTES`` (a traceback keeps its end, where the error is).
"""

from datetime import datetime
from typing import Any

import msgspec

from jobledger.domain.json_values import json_problem

MAX_MESSAGE_CHARS = 2000
MAX_FIELDS_BYTES = 8192
MAX_TRACEBACK_CHARS = 6000
LEVELS = ("debug", "info", "warning", "error", "critical")
_CUT = "…"


class LogLine(msgspec.Struct, frozen=True, kw_only=True):
    """One line a handler logged: when, how loud, what it said, and its fields."""

    at: datetime
    level: str
    message: str
    fields: dict[str, Any] = msgspec.field(default_factory=dict)

    @classmethod
    def bounded(
        cls, *, at: datetime, level: str, message: str, fields: dict[str, Any]
    ) -> "LogLine":
        """A line from whatever the handler logged: the level one of ``LEVELS``, the
        message cut, the fields kept if the log can carry them (else as their text)."""
        shown = level.lower() if level.lower() in LEVELS else "info"
        return cls(
            at=at, level=shown, message=_cut(message, MAX_MESSAGE_CHARS), fields=_fields(fields)
        )

    def size(self) -> int:
        """About what the line costs the log, in bytes."""
        return len(self.message) + len(msgspec.json.encode(self.fields))


class LogPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How much of an attempt's lines the log keeps."""

    max_lines: int = 1000
    max_bytes: int = 256 * 1024


def traceback_tail(text: str) -> str:
    """A traceback's last ``MAX_TRACEBACK_CHARS``: the frames nearest the error."""
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    return _CUT + text[-MAX_TRACEBACK_CHARS:]


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + _CUT


def _fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields as the log can carry them: a value it cannot (an object, a key that
    is not text) becomes its text, and fields too large become one ``fields`` text."""
    kept = {
        str(key): value if json_problem(value, str(key)) is None else _cut(repr(value), 500)
        for key, value in fields.items()
    }
    if len(msgspec.json.encode(kept)) <= MAX_FIELDS_BYTES:
        return kept
    return {"fields": _cut(msgspec.json.encode(kept).decode(), MAX_FIELDS_BYTES // 2)}
