"""Waiting at start for a store that is not up yet: which errors are waited out, how
long, and what is said (a fake clock; no store)."""

from collections.abc import Callable, Sequence

import psycopg
import pytest
import redis

from jobledger.infra.start_wait import LONGEST_PAUSE, StartWait, worth_waiting

REFUSED = psycopg.OperationalError(
    'connection failed: connection to server at "127.0.0.1", port 5999 failed: '
    "Connection refused\n\tIs the server running on that host and accepting TCP/IP?"
)
STARTING = psycopg.OperationalError(
    'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
    "the database system is starting up"
)
NO_DATABASE = psycopg.OperationalError(
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
    'database "nosuchdb" does not exist'
)
BAD_PASSWORD = psycopg.OperationalError(
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
    'password authentication failed for user "jobledger"'
)
UNRESOLVED = psycopg.OperationalError(
    "failed to resolve host 'db': [Errno -2] Name or service not known"
)
BAD_OPTION = psycopg.OperationalError('connection is bad: invalid sslmode value: "bogus"')

# (the error, whether it may pass by itself)
ERRORS = [
    (REFUSED, True),
    (STARTING, True),
    (UNRESOLVED, True),
    (psycopg.OperationalError("FATAL:  sorry, too many clients already"), True),
    (NO_DATABASE, False),
    (BAD_PASSWORD, False),
    (BAD_OPTION, False),
    (redis.ConnectionError("Error 111 connecting to redis:6379. Connection refused."), True),
    (redis.TimeoutError("Timeout connecting to server"), True),
    (redis.BusyLoadingError("Redis is loading the dataset in memory"), True),
    (redis.AuthenticationError("invalid username-password pair"), False),
    (redis.ResponseError("NOAUTH Authentication required."), False),
    (ValueError("Redis URL must specify one of the following schemes"), False),
]


@pytest.mark.parametrize(("error", "waits"), ERRORS)
def test_only_what_may_pass_by_itself_is_waited_for(error: Exception, waits: bool) -> None:
    """If a store cannot be reached yet (nothing listens, a name that does not resolve
    yet, a server starting up or full), then it is waited for; if the settings are
    wrong (a database or user that does not exist, a bad password, a bad option), then
    not."""
    assert worth_waiting(error) is waits


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def probe_failing(errors: Sequence[Exception]) -> Callable[[], None]:
    """A probe that raises ``errors`` one after another, then answers."""
    left = list(errors)

    def probe() -> None:
        if left:
            raise left.pop(0)

    return probe


def test_a_store_that_comes_up_is_waited_for_saying_so_once_per_change() -> None:
    """If a store refuses, then starts up, then answers, then the wait says it waits
    (once per different error) and that it is reachable, with pauses that grow but
    never past the longest."""
    clock = Clock()
    wait = StartWait(60, sleep=clock.sleep, clock=clock, rand=lambda: 1.0)
    wait.until_reachable("postgresql", probe_failing([REFUSED] * 8 + [STARTING] * 2))
    assert wait.said == ["start.waiting", "start.waiting", "start.reachable"]
    assert clock.pauses[:3] == [0.2, 0.4, 0.8]
    assert max(clock.pauses) == LONGEST_PAUSE


def test_a_mistake_stops_at_once_without_a_word_of_waiting() -> None:
    """If the first try meets a mistake in the settings, then it is raised at once: no
    pause, no waiting line."""
    clock = Clock()
    wait = StartWait(60, sleep=clock.sleep, clock=clock)
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        wait.until_reachable("postgresql", probe_failing([NO_DATABASE]))
    assert (clock.pauses, wait.said) == ([], [])


def test_a_store_that_never_comes_gives_up_at_the_timeout() -> None:
    """If a store is never reachable, then the wait gives up once the timeout has
    passed (the last pause cut to it), raising the last error; with a timeout of 0 it
    does not wait at all."""
    clock = Clock()
    wait = StartWait(10, sleep=clock.sleep, clock=clock, rand=lambda: 1.0)
    with pytest.raises(psycopg.OperationalError, match="refused"):
        wait.until_reachable("postgresql", probe_failing([REFUSED] * 1000))
    assert clock.now == pytest.approx(10)
    assert wait.said == ["start.waiting", "start.gave_up"]
    right_away = StartWait(0, sleep=clock.sleep, clock=Clock())
    with pytest.raises(redis.ConnectionError):
        right_away.until_reachable("redis", probe_failing([redis.ConnectionError("refused")]))
    assert right_away.said == []
