"""Progress a handler reports while it runs: a value object and when to record it.

A handler may report progress many times a second; the log must not flood. Live views
get it at most every ``live_every`` (the worker keeps the latest in Redis), and the
log at most every ``log_every`` or when the message changes (``ProgressPolicy``), so a
run's history says how far it got, in steps a reader can follow.
"""

import math
from datetime import datetime, timedelta
from typing import Any

import msgspec

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.json_values import check_json, check_text

MAX_MESSAGE_CHARS = 500
MAX_DATA_BYTES = 4096


class Progress(msgspec.Struct, frozen=True, kw_only=True):
    """How far a run has got: a percentage (None: unknown), a message, and small data."""

    percent: float | None = None
    message: str = ""
    data: dict[str, Any] = msgspec.field(default_factory=dict)

    def check(self) -> None:
        """Refuse a value the stores cannot carry or a reader cannot use."""
        if self.percent is not None and (
            isinstance(self.percent, bool)
            or not isinstance(self.percent, int | float)
            or not math.isfinite(self.percent)
            or not 0 <= self.percent <= 100  # noqa: PLR2004 (a percentage)
        ):
            raise InvalidDefinitionError(
                "percent", f"is {self.percent!r}", "report a number from 0 to 100, or None"
            )
        check_text(self.message, "message", max_chars=MAX_MESSAGE_CHARS)
        if not isinstance(self.data, dict):
            raise InvalidDefinitionError(
                "data", f"is a {type(self.data).__name__}", "report a JSON object"
            )
        check_json(self.data, "data", max_bytes=MAX_DATA_BYTES)


class ProgressPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """When a report is shown live and when it is recorded in the log."""

    live_every: timedelta = timedelta(seconds=1)
    log_every: timedelta = timedelta(seconds=10)

    def show_live(self, last_shown: datetime | None, at: datetime) -> bool:
        return last_shown is None or at - last_shown >= self.live_every

    def record(
        self, progress: Progress, last: Progress | None, last_at: datetime | None, at: datetime
    ) -> bool:
        """Record the first report, a new message, and otherwise one every ``log_every``."""
        if last is None or last_at is None or progress.message != last.message:
            return True
        return at - last_at >= self.log_every
