"""The breaker storage port's contract (``infra.breakers.StorageFor``), run through
``runtime.breakers.Breakers`` on every storage: process memory (``in_memory``, the
embedded mode), one Redis server and a Redis Cluster (``shared_storage``, every worker
alike).

pybreaker reads the wall clock for when a breaker opened and when its timeout ends;
the tests set that clock instead of waiting for it.
"""

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import ClassVar, Self

import pybreaker
import pytest
from tests.integration.ports.backends import MEMORY_AND_REDIS, redis_under_a_prefix
from tests.integration.queue_backends import REDIS_BACKENDS

from jobledger.adapters.redis.breakers import shared_storage
from jobledger.infra.breakers import BreakerSettings, StorageFor, in_memory
from jobledger.runtime.breakers import Breakers
from jobledger.runtime.handlers.base import (
    CircuitOpenError,
    Discard,
    HandlerCancelledError,
    PayloadRefusedError,
    PermanentError,
    Snooze,
)

# Half a second past a whole one: Redis keeps the opening time in whole seconds.
OPENED = datetime(2026, 12, 7, 9, 0, 0, 500_000, tzinfo=UTC)
RESET = 30.0
H = "http.webhook"


class BreakerClock(datetime):
    """pybreaker's ``datetime``: ``now`` answers ``at``, which the test moves."""

    at: ClassVar[datetime] = OPENED

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> Self:
        return cls.fromtimestamp(cls.at.timestamp(), tz)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> type[BreakerClock]:
    monkeypatch.setattr(BreakerClock, "at", OPENED)
    monkeypatch.setattr(pybreaker, "datetime", BreakerClock)
    return BreakerClock


@pytest.fixture(params=MEMORY_AND_REDIS)
def storage(request: pytest.FixtureRequest) -> StorageFor:
    if request.param == "memory":
        return in_memory
    return shared_storage(*redis_under_a_prefix(request))


@pytest.fixture(params=REDIS_BACKENDS)
def shared(request: pytest.FixtureRequest) -> StorageFor:
    """A storage every worker shares (memory is one process's own)."""
    return shared_storage(*redis_under_a_prefix(request))


def breakers_on(storage: StorageFor, fail_max: int = 2, success_threshold: int = 1) -> Breakers:
    # refresh=0: every call reads the shared state, so a test sees each change at once.
    settings = BreakerSettings(
        fail_max=fail_max, reset_timeout=RESET, success_threshold=success_threshold, refresh=0
    )
    return Breakers(storage, settings)


# What the runs here raise: a dependency's failure, and what is none.
RAISED = (
    ConnectionError,
    asyncio.CancelledError,
    HandlerCancelledError,
    PayloadRefusedError,
    PermanentError,
    Snooze,
    Discard,
)


def attempt(breakers: Breakers, handler: str = H, error: BaseException | None = None) -> str:
    """One run under the handler's breaker: "deferred" if the breaker refused it, else
    "ok" or the name of the error the run raised (the block ran either way)."""
    try:
        with breakers.guard(handler):
            if error is not None:
                raise error
    except CircuitOpenError:
        return "deferred"
    except RAISED as raised:
        return type(raised).__name__
    return "ok"


def down() -> ConnectionError:
    return ConnectionError("target down")


def test_fail_max_failures_in_a_row_open_the_breaker(storage: StorageFor) -> None:
    """If a handler's runs fail fail_max times in a row, then each of them ran and
    failed with its own error, the next run is deferred without running, and the
    breaker reads open."""
    breakers = breakers_on(storage, fail_max=3)
    assert [attempt(breakers, error=down()) for _ in range(3)] == ["ConnectionError"] * 3
    ran = []
    with pytest.raises(CircuitOpenError), breakers.guard(H):
        ran.append(H)
    assert ran == []
    assert breakers.states() == {H: pybreaker.STATE_OPEN}


def test_a_success_between_failures_starts_the_count_again(storage: StorageFor) -> None:
    """If a success comes between failures, then only failures after it count: fail,
    ok, fail leaves a breaker of fail_max 2 closed, and one more failure opens it."""
    breakers = breakers_on(storage, fail_max=2)
    outcomes = [attempt(breakers, error=down()), attempt(breakers), attempt(breakers, error=down())]
    assert outcomes == ["ConnectionError", "ok", "ConnectionError"]
    assert breakers.states() == {H: pybreaker.STATE_CLOSED}
    assert attempt(breakers, error=down()) == "ConnectionError"
    assert attempt(breakers) == "deferred"


def test_each_handler_has_a_breaker_of_its_own(storage: StorageFor) -> None:
    """If one handler's breaker opens, then another handler's runs still run, and the
    states name each handler used with its own state."""
    breakers = breakers_on(storage, fail_max=1)
    assert attempt(breakers, error=down()) == "ConnectionError"
    assert attempt(breakers, "shell.command", down()) == "ConnectionError"
    assert attempt(breakers, "test.echo") == "ok"
    assert breakers.states() == {
        H: pybreaker.STATE_OPEN,
        "shell.command": pybreaker.STATE_OPEN,
        "test.echo": pybreaker.STATE_CLOSED,
    }


def test_an_open_breaker_lets_a_probe_through_after_the_timeout(
    storage: StorageFor, clock: type[BreakerClock]
) -> None:
    """If the breaker opened, then runs are deferred for the reset timeout (less the
    second Redis rounds the opening time down by); after it one probe runs, and its
    success closes the breaker."""
    breakers = breakers_on(storage, fail_max=1)
    assert attempt(breakers, error=down()) == "ConnectionError"
    clock.at = OPENED + timedelta(seconds=RESET - 1)
    assert attempt(breakers) == "deferred"
    clock.at = OPENED + timedelta(seconds=RESET)
    assert attempt(breakers) == "ok"
    assert breakers.states() == {H: pybreaker.STATE_CLOSED}


def test_a_probe_that_fails_opens_the_breaker_for_another_timeout(
    storage: StorageFor, clock: type[BreakerClock]
) -> None:
    """If the probe after the timeout fails, then the breaker is open again, counted
    from the probe: runs are deferred until another timeout has passed."""
    breakers = breakers_on(storage, fail_max=1)
    assert attempt(breakers, error=down()) == "ConnectionError"
    probed = OPENED + timedelta(seconds=RESET)
    clock.at = probed
    assert attempt(breakers, error=down()) == "ConnectionError"
    clock.at = probed + timedelta(seconds=RESET - 1)
    assert attempt(breakers) == "deferred"
    assert breakers.states() == {H: pybreaker.STATE_OPEN}
    clock.at = probed + timedelta(seconds=RESET)
    assert attempt(breakers) == "ok"


def test_a_breaker_closes_after_success_threshold_probes(
    storage: StorageFor, clock: type[BreakerClock]
) -> None:
    """If success_threshold is 2, then after the timeout the first successful probe
    leaves the breaker half-open and the second closes it."""
    breakers = breakers_on(storage, fail_max=1, success_threshold=2)
    assert attempt(breakers, error=down()) == "ConnectionError"
    clock.at = OPENED + timedelta(seconds=RESET)
    assert attempt(breakers) == "ok"
    assert breakers.states() == {H: pybreaker.STATE_HALF_OPEN}
    assert attempt(breakers) == "ok"
    assert breakers.states() == {H: pybreaker.STATE_CLOSED}


NOT_FAILURES: list[Callable[[], BaseException]] = [
    asyncio.CancelledError,
    lambda: HandlerCancelledError("cancelled while sleeping"),
    lambda: PayloadRefusedError(f"{H}: 10.0.0.1 is a private address"),
    lambda: PermanentError("the record is gone"),
    lambda: Snooze(60, "not ready"),
    lambda: Discard("the order was cancelled"),
]


@pytest.mark.parametrize(
    "error",
    NOT_FAILURES,
    ids=["cancelled", "stopped", "payload-refused", "permanent", "snooze", "discard"],
)
def test_stopping_refusing_a_payload_or_deciding_is_no_failure(
    storage: StorageFor, error: Callable[[], BaseException]
) -> None:
    """If a handler's runs stop on request (shutdown, lost lease), refuse their own
    input, or decide about their run (permanent, snooze, discard) more than fail_max
    times in a row, then each ran and raised its own error, the breaker stays closed,
    and the next run that fails still runs."""
    breakers = breakers_on(storage, fail_max=2)
    name = type(error()).__name__
    assert [attempt(breakers, error=error()) for _ in range(5)] == [name] * 5
    assert breakers.states() == {H: pybreaker.STATE_CLOSED}
    assert attempt(breakers, error=down()) == "ConnectionError"


def test_a_breaker_opened_by_one_worker_is_open_for_all(shared: StorageFor) -> None:
    """If one worker's runs of a handler fail fail_max times in a row, then another
    worker on the same storage sees the breaker open and defers, while other
    handlers' breakers stay closed for it."""
    first, second = breakers_on(shared), breakers_on(shared)
    assert [attempt(first, error=down()) for _ in range(2)] == ["ConnectionError"] * 2
    assert attempt(second) == "deferred"
    assert second.states() == {H: pybreaker.STATE_OPEN}
    assert attempt(second, "shell.command", down()) == "ConnectionError"


def test_a_breaker_closed_by_one_workers_probe_is_closed_for_all(
    shared: StorageFor, clock: type[BreakerClock]
) -> None:
    """If the breaker is open for two workers and one's probe succeeds after the
    timeout, then the other's runs run again."""
    first, second = breakers_on(shared, fail_max=1), breakers_on(shared, fail_max=1)
    assert attempt(first, error=down()) == "ConnectionError"
    assert attempt(second) == "deferred"
    clock.at = OPENED + timedelta(seconds=RESET)
    assert attempt(first) == "ok"
    assert attempt(second) == "ok"
    assert second.states() == {H: pybreaker.STATE_CLOSED}
