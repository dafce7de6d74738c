"""The wall clock. Rules take the time as an argument; the edges (a request, a CLI
command, a tick) read it here once and pass it on, so tests can inject their own."""

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Now, in UTC."""
    return datetime.now(tz=UTC)
