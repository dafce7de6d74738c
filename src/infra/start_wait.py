"""Waiting at start for a store that is not up yet.

A stack starts all at once (compose, Kubernetes): a worker may come up before
PostgreSQL or Redis accepts connections. A role then waits, trying again with capped
exponential back-off and jitter for up to ``JOBLEDGER_START_TIMEOUT`` seconds, and says
so in one line per change (``start.waiting`` as it begins or the error changes,
``start.reachable`` with the seconds waited). What waiting cannot mend stops it at once:
a malformed URL, a refused login, a database that does not exist (and, checked after
this, a store that misses a migration), so a mistake is one line and exit 2, not a
minute of retries.
"""

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
import redis
import structlog

from jobledger.domain.json_values import error_line

log = structlog.get_logger(__name__)

FIRST_PAUSE = 0.2
LONGEST_PAUSE = 5.0
_ERROR_CHARS = 300
# What PostgreSQL answers while it cannot take a connection yet, or for a while.
_PG_BUSY = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "too many clients",
    "remaining connection slots",
)


def worth_waiting(error: BaseException) -> bool:
    """Whether ``error`` may pass by itself (nothing listens yet, a name that does not
    resolve yet, a server starting up) rather than being a mistake in the settings."""
    if isinstance(error, redis.AuthenticationError | redis.ResponseError):
        return False  # a refused password; NOAUTH, WRONGPASS
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return True
    if isinstance(error, psycopg.OperationalError):
        text = str(error)
        if "FATAL:" in text:  # the server answered: only "not now" is worth a wait
            return any(busy in text for busy in _PG_BUSY)
        return "invalid" not in text  # "invalid sslmode value", "invalid integer value"
    return False


@dataclass
class StartWait:
    """Tries a dependency's probe until it answers, ``worth_waiting`` says stop, or
    ``timeout`` seconds pass (then the last error is raised)."""

    timeout: float
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    said: list[str] = field(default_factory=list)  # the lines logged, for tests

    def until_reachable(self, dependency: str, probe: Callable[[], object]) -> None:
        began = self.clock()
        pause, last = FIRST_PAUSE, ""
        while True:
            try:
                probe()
            except Exception as error:
                waited = self.clock() - began
                if not worth_waiting(error) or waited >= self.timeout:
                    if last:
                        self._say("start.gave_up", dependency, waited, error)
                    raise
                text = error_line(error, max_chars=_ERROR_CHARS)
                if text != last:
                    self._say("start.waiting", dependency, waited, error)
                    last = text
                # Full jitter: a fleet started together does not knock in step.
                step = min(pause, max(self.timeout - waited, 0.0))
                self.sleep(step * (0.5 + self.rand() / 2))
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            if last:
                self._say("start.reachable", dependency, self.clock() - began, None)
            return

    def _say(self, what: str, dependency: str, waited: float, error: Exception | None) -> None:
        self.said.append(what)
        fields: dict[str, object] = {"dependency": dependency, "waited_seconds": round(waited, 1)}
        if error is not None:
            fields["error"] = error_line(error, max_chars=_ERROR_CHARS)
        if what == "start.waiting":
            fields["timeout_seconds"] = self.timeout
        (log.info if what == "start.reachable" else log.warning)(what, **fields)
