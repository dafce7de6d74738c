"""The port of the handlers' circuit breakers: their settings, and where a breaker's
state is kept (in memory here; shared by every worker in ``adapters.redis.breakers``)."""

from collections.abc import Callable
from dataclasses import dataclass

import pybreaker

from jobledger.infra.outages import DependencyHealth


@dataclass(frozen=True)
class BreakerSettings:
    fail_max: int = 3
    reset_timeout: float = 30.0
    success_threshold: int = 1
    # How stale a worker's view of a breaker opened elsewhere may be.
    refresh: float = 0.5


# A breaker's state storage, by handler name: in memory (one process), or shared by
# every worker (``adapters.redis.breakers``).
StorageFor = Callable[[str, BreakerSettings, DependencyHealth], pybreaker.CircuitBreakerStorage]


def in_memory(
    _handler: str, _settings: BreakerSettings, _health: DependencyHealth
) -> pybreaker.CircuitBreakerStorage:
    """A breaker that only this process sees (the embedded mode)."""
    return pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
