"""The wall clock. Rules take the time as an argument; the edges (a request, a CLI
command, a tick) read it here once and pass it on, so tests can inject their own."""

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
# Seconds from an arbitrary start that never jump (``time.monotonic``): for pauses,
# deadlines and back-offs inside one process.
MonotonicClock = Callable[[], float]


def utc_now() -> datetime:
    """Now, in UTC."""
    return datetime.now(tz=UTC)
