"""The handlers' circuit breakers with their state in Redis, shared by every worker.

An unreachable Redis is no handler failure: pybreaker then reads a breaker as closed
and skips its counting, so runs go on, and the outage is reported to the process's
dependency tracker instead of as a traceback per call.
"""

import sys
import time
from typing import cast

import pybreaker
import redis
import structlog

from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.keys import Keys
from jobledger.infra.breakers import BreakerSettings, StorageFor
from jobledger.infra.outages import DependencyHealth

log = structlog.get_logger(__name__)


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


def shared_storage(client: RedisClient, keys: Keys) -> StorageFor:
    """Breaker state in Redis under ``keys``, for every worker alike."""

    def storage(
        handler: str, settings: BreakerSettings, health: DependencyHealth
    ) -> pybreaker.CircuitBreakerStorage:
        return _SharedStorage(
            pybreaker.STATE_CLOSED,
            client,
            namespace=keys.breaker(handler),
            refresh=settings.refresh,
            health=health,
        )

    return storage
