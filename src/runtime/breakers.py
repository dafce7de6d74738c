"""Circuit breakers per handler type, shared by every worker (through Redis, in
``adapters.redis.breakers``).

pybreaker counts *consecutive* failures: after ``fail_max`` of them the breaker opens
for ``reset_timeout`` seconds, then lets one probe through (half-open); a success closes
it. The predecessor's "50% errors over 5 calls, retry after 30 s" maps to
``fail_max=3, reset_timeout=30``: three failures in a row (what a dead dependency
produces) open it, a healthy one with occasional errors never does. While a breaker
is open, executions of that handler are deferred, not failed: no attempt is spent.

"""

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pybreaker
import structlog

from jobledger.infra.breakers import BreakerSettings, StorageFor, in_memory
from jobledger.infra.outages import DependencyHealth
from jobledger.runtime.handlers.base import (
    CircuitOpenError,
    HandlerCancelledError,
    HandlerDecision,
    PayloadRefusedError,
)

log = structlog.get_logger(__name__)


class Breakers:
    """One breaker per handler name, its state kept by ``storage``."""

    def __init__(
        self,
        storage: StorageFor = in_memory,
        settings: BreakerSettings = BreakerSettings(),
        health: DependencyHealth | None = None,
    ) -> None:
        self._storage = storage
        self._health = health or DependencyHealth("worker")
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
        storage = self._storage(handler, self._settings, self._health)
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
