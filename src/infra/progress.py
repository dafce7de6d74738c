"""A progress bar for long operations (rebuilds, replays) on a terminal or a log.

The bar redraws one line in place, so the line stays open between draws. A log line
written meanwhile (the operation logs as it goes, on the same stream) would be glued
to the bar's text: ``end_progress_line``, a log processor, ends the open line first.
"""

import sys
import threading
import time
from typing import Any, ClassVar, TextIO


class ProgressBar:
    """Redraws one line at most every ``interval`` seconds; ``finish`` ends the line."""

    # The bar whose line is open (drawn, not ended), if any; one process draws one bar.
    _open: ClassVar["ProgressBar | None"] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, label: str, stream: TextIO | None = None, interval: float = 0.2) -> None:
        self._label = label
        # Resolved now, not at import: a test or a redirect may have replaced it.
        self.stream = stream if stream is not None else sys.stderr
        self._interval = interval
        self._last = 0.0
        self._started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last >= self._interval or done >= total:
            self._last = now
            self._draw(done, total, now)

    def _draw(self, done: int, total: int, now: float) -> None:
        share = done / total if total else 1.0
        filled = int(share * 30)
        bar = "#" * filled + "-" * (30 - filled)
        elapsed = now - self._started
        with ProgressBar._lock:
            self.stream.write(
                f"\r{self._label} [{bar}] {share:6.1%} {done:,}/{total:,} {elapsed:5.1f}s"
            )
            self.stream.flush()
            ProgressBar._open = self

    def finish(self) -> None:
        """End the bar's line (once; a log line may have ended it already)."""
        with ProgressBar._lock:
            if ProgressBar._open is self:
                ProgressBar._end_open_line()

    @classmethod
    def end_open_line(cls) -> None:
        """End whichever bar's line is open, so what is written next starts a line."""
        with cls._lock:
            cls._end_open_line()

    @classmethod
    def _end_open_line(cls) -> None:
        bar = cls._open
        if bar is not None:
            bar.stream.write("\n")
            bar.stream.flush()
            cls._open = None


def end_progress_line(_logger: object, _method: str, event_dict: Any) -> Any:  # noqa: ANN401 (a structlog processor passes the event through)
    """A log processor: end an open progress bar's line before the entry is written, so
    the entry starts on a line of its own and the bar goes on below it."""
    ProgressBar.end_open_line()
    return event_dict
