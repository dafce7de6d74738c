"""A progress bar for long operations (rebuilds, replays) on a terminal or a log."""

import sys
import time
from typing import TextIO


class ProgressBar:
    """Redraws one line at most every ``interval`` seconds; ``done`` ends the line."""

    def __init__(self, label: str, stream: TextIO = sys.stderr, interval: float = 0.2) -> None:
        self._label = label
        self._stream = stream
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
        self._stream.write(
            f"\r{self._label} [{bar}] {share:6.1%} {done:,}/{total:,} {elapsed:5.1f}s"
        )
        self._stream.flush()

    def finish(self) -> None:
        self._stream.write("\n")
        self._stream.flush()
