"""The lines one running attempt's handler logs, held until they are recorded (ADR 104).

The worker sets ``ATTEMPT_SINK`` to ``AttemptLines.write`` around the handler's call:
``ctx.log`` lines, standard ``logging`` records and the traceback of a handler that
raised come here, from the event loop or any thread the handler's context reaches.
They wait here, within the attempt's bound (``LogPolicy``), until the worker records
them: about once a second while the handler runs (``take``), and the rest with the
outcome.
"""

import threading
from typing import Any

from jobledger.domain.clock import Clock
from jobledger.domain.run_logs import LogLine, LogPolicy, traceback_tail

# What the worker binds to the handler's logger: the same on every line, so not kept.
BOUND = frozenset({"execution_id", "job_id", "attempt", "worker_id"})


class AttemptLines:
    """An attempt's lines not yet recorded, and what its bound left out."""

    def __init__(self, policy: LogPolicy, now: Clock) -> None:
        self._policy = policy
        self._now = now
        self._lock = threading.Lock()
        self._pending: list[LogLine] = []
        self._dropped = 0
        self._lines = self._bytes = 0  # kept so far, recorded or pending

    def write(self, level: str, message: str, fields: dict[str, Any]) -> None:
        """One line, as the logging sink hands it over (see the module docstring)."""
        kept = {key: value for key, value in fields.items() if key not in BOUND}
        shown = kept.get("exception")
        if isinstance(shown, str):
            kept["exception"] = traceback_tail(shown)
        line = LogLine.bounded(at=self._now(), level=level, message=message, fields=kept)
        size = line.size()
        with self._lock:
            full = self._lines >= self._policy.max_lines
            if full or self._bytes + size > self._policy.max_bytes:
                self._dropped += 1
                return
            self._pending.append(line)
            self._lines += 1
            self._bytes += size

    def take(self) -> tuple[list[LogLine], int]:
        """The lines written since the last take, and how many the bound left out."""
        with self._lock:
            lines, dropped = self._pending, self._dropped
            self._pending, self._dropped = [], 0
        return lines, dropped

    def put_back(self, lines: list[LogLine], dropped: int) -> None:
        """Lines taken but not recorded: ahead of any written since, for the next take."""
        with self._lock:
            self._pending[:0] = lines
            self._dropped += dropped
