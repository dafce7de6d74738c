"""Circuit breakers per handler type, shared by every worker through Redis.

pybreaker counts *consecutive* failures: after ``fail_max`` of them the breaker opens
for ``reset_timeout`` seconds, then lets one probe through (half-open); a success closes
it. The predecessor's "50% errors over 5 calls, retry after 30 s" maps to
``fail_max=3, reset_timeout=30``: three failures in a row (what a dead dependency
produces) open it, a healthy one with occasional errors never does. While a breaker
is open, executions of that handler are deferred, not failed: no attempt is spent.

An unreachable Redis is no handler failure: pybreaker then reads a breaker as closed
and skips its counting, so runs go on, and the outage is reported to the process's
dependency tracker instead of as a traceback per call.
"""

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import pybreaker
import redis
import structlog

from jobledger.projections.redis_client import RedisClient
from jobledger.projections.redis_keys import Keys
from jobledger.runtime.handlers.base import (
    CircuitOpenError,
    HandlerCancelledError,
    HandlerDecision,
    PayloadRefusedError,
)
from jobledger.runtime.outages import DependencyHealth

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class BreakerSettings:
    fail_max: int = 3
    reset_timeout: float = 30.0
    success_threshold: int = 1
    # How stale a worker's view of a breaker opened elsewhere may be.
    refresh: float = 0.5


class _RedisErrors:
    """Stands in for pybreaker's logger, which it calls inside each ``except
    RedisError`` it falls back from: hands the error to the dependency tracker."""

    def __init__(self, health: DependencyHealth) -> None:
        self._health = health

    def exception(self, message: str) -> None:
        error = sys.exc_info()[1]
        if error is None or self._health.report(error, self._health.clock()) is None:
            log.warning("breaker.redis_error", message=message, error=str(error))


class _SharedStorage(pybreaker.CircuitRedisStorage):
    """Redis storage that reads the shared state at most every ``refresh`` seconds and
    skips resetting a failure counter it reset itself moments ago.

    Without this, every call of a healthy handler costs two Redis round trips on the
    worker's event loop (read the state, reset the counter). A breaker opened by
    another worker is seen within ``refresh`` seconds; a failure counted by another
    worker in that window is not reset by a success here, which only makes the
    breaker a little quicker to open.
    """

    def __init__(
        self,
        state: str,
        client: RedisClient,
        *,
        namespace: str,
        refresh: float,
        health: DependencyHealth,
    ) -> None:
        # Only .exception() is called on it; before super(): that talks to Redis at once.
        self.logger = _RedisErrors(health)  # type: ignore[assignment]
        # pybreaker names the single-server client; it uses single-key commands and
        # WATCH on one key only, which a cluster client serves alike.
        super().__init__(state, cast("redis.Redis", client), namespace=namespace)
        self._refresh = refresh
        self._state_cache: tuple[str, float] | None = None
        self._zero_until = 0.0

    def _initialize_redis_state(self, state: str) -> None:
        # pybreaker lets these errors through: a breaker made during an outage would
        # fail the run that asked for it. The keys are set on a later read instead.
        try:
            super()._initialize_redis_state(state)
        except redis.RedisError:
            self.logger.exception("RedisError: state not initialised")

    @property
    def state(self) -> str:
        now = time.monotonic()
        if self._state_cache is not None and now < self._state_cache[1]:
            return self._state_cache[0]
        state: str = super().state
        self._state_cache = (state, now + self._refresh)
        return state

    @state.setter
    def state(self, state: str) -> None:
        pybreaker.CircuitRedisStorage.state.fset(self, state)  # type: ignore[attr-defined]
        self._state_cache = (str(state), time.monotonic() + self._refresh)

    def increment_counter(self) -> None:
        self._zero_until = 0.0
        super().increment_counter()

    def reset_counter(self) -> None:
        now = time.monotonic()
        if now < self._zero_until:
            return
        super().reset_counter()
        self._zero_until = now + self._refresh


class Breakers:
    """One breaker per handler name; state in Redis when a client is given."""

    def __init__(
        self,
        client: RedisClient | None,
        keys: Keys,
        settings: BreakerSettings = BreakerSettings(),
        health: DependencyHealth | None = None,
    ) -> None:
        self._client = client
        self._health = health or DependencyHealth("worker")
        self._keys = keys
        self._settings = settings
        self._breakers: dict[str, pybreaker.CircuitBreaker] = {}
        self._lock = threading.Lock()

    def get(self, handler: str) -> pybreaker.CircuitBreaker:
        with self._lock:
            breaker = self._breakers.get(handler)
            if breaker is None:
                breaker = self._breakers[handler] = self._make(handler)
            return breaker

    def states(self) -> dict[str, str]:
        with self._lock:
            return {name: str(b.current_state) for name, b in self._breakers.items()}

    @contextmanager
    def guard(self, handler: str) -> Iterator[None]:
        """Run the block under the handler's breaker; an open breaker raises
        CircuitOpenError before the block runs (the caller defers)."""
        try:
            with self.get(handler).calling():
                yield
        except pybreaker.CircuitBreakerError as error:
            raise CircuitOpenError(f"{handler}: circuit open ({error})") from None

    def _make(self, handler: str) -> pybreaker.CircuitBreaker:
        storage: pybreaker.CircuitBreakerStorage
        if self._client is None:
            storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        else:
            storage = _SharedStorage(
                pybreaker.STATE_CLOSED,
                self._client,
                namespace=self._keys.breaker(handler),
                refresh=self._settings.refresh,
                health=self._health,
            )
        return pybreaker.CircuitBreaker(
            fail_max=self._settings.fail_max,
            reset_timeout=self._settings.reset_timeout,
            success_threshold=self._settings.success_threshold,
            state_storage=storage,
            # The failing call itself is an ordinary failed attempt; later calls defer.
            throw_new_error_on_trip=False,
            # Stopping on request, and refusing an execution's own input (a destination
            # the SSRF guard refuses, an invalid URL), are no failures of the dependency:
            # three bad payloads must not defer every other execution of the handler.
            exclude=[
                asyncio.CancelledError,
                HandlerCancelledError,
                PayloadRefusedError,
                HandlerDecision,
            ],
            name=handler,
        )
