"""Dependency outages: how a role notices PostgreSQL or Redis going away and coming back.

Every loop that talks to a store reports its failures and successes to one tracker per
process. The tracker turns them into one warning when an outage starts
(``dependency.down``), one line when it ends (``dependency.up`` with ``outage_seconds``),
the ``jobledger_dependency_up`` gauge, and the pause before the next try: capped
exponential back-off with jitter, so a fleet of processes does not retry in step. Only
errors that mean "the store cannot be reached" count (``dependency_of``); any other error
stays the business of the loop that met it.
"""

import random
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
import redis
import structlog
from eventsourcing import persistence
from prometheus_client import Gauge

from jobledger.domain.clock import MonotonicClock
from jobledger.domain.json_values import error_line
from jobledger.infra.background import Background

log = structlog.get_logger(__name__)

POSTGRESQL = "postgresql"
REDIS = "redis"


_POSTGRES_ERRORS: tuple[type[Exception], ...] = (
    psycopg.OperationalError,  # AdminShutdown, a refused connection, a pool timeout
    psycopg.InterfaceError,  # a connection closed under the caller
)
# What a cluster answers, or its client finds, while a slot has no reachable master:
# an outage, as a refused connection is, not an error of the command.
CLUSTER_OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ClusterError,  # CLUSTERDOWN, MASTERDOWN, a redirection loop
    redis.exceptions.TryAgainError,  # a slot in migration
    redis.exceptions.SlotNotCoveredError,
)


# eventsourcing wraps the driver's errors in classes of its own.
_WRAPPED_ERRORS: tuple[type[Exception], ...] = (
    persistence.OperationalError,
    persistence.InterfaceError,
)
_REDIS_ERRORS: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    *CLUSTER_OUTAGE_ERRORS,
)
# Every class ``dependency_of`` may name a store for: what a loop catches.
OUTAGE_ERRORS = _REDIS_ERRORS + _POSTGRES_ERRORS + _WRAPPED_ERRORS
_MAX_ERROR_TEXT = 300


# The server's own codes for "not reachable now": a connection exception (class 08),
# too many connections or no resources (class 53), and a shutdown or start-up in
# progress. Other operational errors (a lock or statement timeout, a cancelled query)
# come from a server that answers.
_UNREACHABLE_CLASSES = frozenset({"08", "53"})
_UNREACHABLE_CODES = frozenset({"57P01", "57P02", "57P03"})


def dependency_of(error: BaseException) -> str | None:
    """The store ``error`` says is unreachable, or None if it says something else."""
    if isinstance(error, _REDIS_ERRORS):
        return REDIS
    if isinstance(error, _WRAPPED_ERRORS):
        cause = error.__cause__
        if isinstance(cause, sqlite3.Error):
            return None  # the embedded store is a local file: no server to lose
        if isinstance(cause, psycopg.Error):
            return dependency_of(cause)
        return POSTGRESQL
    if isinstance(error, _POSTGRES_ERRORS):
        # No code: the client's own finding (refused, closed, no pooled connection).
        code = getattr(error, "sqlstate", None)
        if code is None or code[:2] in _UNREACHABLE_CLASSES or code in _UNREACHABLE_CODES:
            return POSTGRESQL
    return None


@dataclass(frozen=True)
class Backoff:
    """Capped exponential back-off with equal jitter: the n-th pause of an outage lies
    between half and all of ``min(cap, initial * 2**(n-1))``."""

    initial: float = 0.1
    # Low enough that a store that is back is used within seconds; each try is one
    # cheap call, so even many processes trying this often do not weigh on it.
    cap: float = 2.0

    def delay(self, failures: int, rand: float) -> float:
        """The pause after ``failures`` failures in a row; ``rand`` is in [0, 1)."""
        ceiling: float = min(self.cap, self.initial * 2.0 ** max(failures - 1, 0))
        return ceiling / 2 + ceiling / 2 * rand


@dataclass
class _Outage:
    since: float
    failures: int
    error: str
    # The loops whose last try failed, with when; see ``succeeded``.
    failing: dict[str, float] = field(default_factory=dict)


def _this_thread() -> str:
    return f"thread-{threading.get_ident()}"


class DependencyHealth:
    """What one process knows of its stores; see the module docstring. Thread-safe."""

    def __init__(
        self,
        role: str,
        *,
        gauge: Gauge | None = None,
        backoff: Backoff = Backoff(),
        clock: MonotonicClock = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.role = role
        self.clock = clock
        self._gauge = gauge
        self._backoff = backoff
        self._rand = rand
        self._outages: dict[str, _Outage] = {}
        self._lock = threading.Lock()

    def expect(self, *dependencies: str) -> None:
        """Export the gauge for ``dependencies`` from the start (the start check found
        them up), so an alert sees a 0, never a missing series."""
        if self._gauge is not None:
            for dependency in dependencies:
                self._gauge.labels(dependency=dependency).set(1)

    def failed(
        self, dependency: str, error: BaseException, now: float, *, loop: str | None = None
    ) -> float:
        """Record a failed try of ``loop`` (by default, the calling thread); returns the
        seconds to wait before the next one."""
        text = error_line(error, max_chars=_MAX_ERROR_TEXT)
        with self._lock:
            outage = self._outages.get(dependency)
            starts = outage is None
            if outage is None:
                outage = self._outages[dependency] = _Outage(now, 0, text)
            outage.failures += 1
            outage.error = text
            outage.failing[loop or _this_thread()] = now
            failures = outage.failures
        if starts:
            if self._gauge is not None:
                self._gauge.labels(dependency=dependency).set(0)
            log.warning(
                "dependency.down", dependency=dependency, role=self.role, error=outage.error
            )
        return self._backoff.delay(failures, self._rand())

    def succeeded(self, dependency: str, now: float, *, loop: str | None = None) -> None:
        """Record a successful try of ``loop`` (by default, the calling thread); ends the
        outage of ``dependency`` if there was one and no other loop is still failing.

        Part of a store may stay down while the rest answers (one master of a Redis
        Cluster): a loop that uses the rest must not end an outage that another loop
        still meets, or the outage would be said over and over. A loop whose last
        failure is older than the longest back-off pause no longer tries (or succeeded
        without saying so) and is not waited for."""
        if dependency not in self._outages:  # the common case, without the lock
            return
        with self._lock:
            outage = self._outages.get(dependency)
            if outage is None:
                return
            outage.failing.pop(loop or _this_thread(), None)
            recent = now - self._backoff.cap
            outage.failing = {name: at for name, at in outage.failing.items() if at > recent}
            if outage.failing:
                return
            del self._outages[dependency]
        if self._gauge is not None:
            self._gauge.labels(dependency=dependency).set(1)
        log.info(
            "dependency.up",
            dependency=dependency,
            role=self.role,
            outage_seconds=round(max(now - outage.since, 0.0), 1),
            failures=outage.failures,
        )

    def report(self, error: BaseException, now: float, *, loop: str | None = None) -> float | None:
        """``failed`` for the store ``error`` names; None if it names none."""
        dependency = dependency_of(error)
        if dependency is None:
            return None
        return self.failed(dependency, error, now, loop=loop)

    def down(self) -> dict[str, str]:
        """The stores in an outage now, with the last error each gave."""
        with self._lock:
            return {name: outage.error for name, outage in self._outages.items()}

    def retry_after(self) -> int:
        """Whole seconds a client should wait before trying again (at least 1)."""
        return max(1, round(self._backoff.cap))

    def watch(self, *dependencies: str) -> "Watch":
        return Watch(self, dependencies)


class OutageProbe(Background):
    """Probes a process's stores from a thread of its own, so a process that calls them
    only on demand (the API) notices an outage, and its end, without traffic: every
    ``interval`` seconds while one is down, every ``idle_interval`` seconds otherwise."""

    interval = 1.0
    idle_interval = 5.0

    def __init__(self, health: DependencyHealth, probes: dict[str, Callable[[], object]]) -> None:
        self._health = health
        self._probes = probes
        super().__init__("outage-probe")

    def _run(self) -> None:
        pause = self.idle_interval
        while not self._stopping.wait(pause):
            self.probe(self._probes)
            pause = self.interval if self._health.down() else self.idle_interval

    def probe(self, probes: dict[str, Callable[[], object]] | None = None) -> None:
        """Try each of ``probes`` (by default, those of the stores that are down)."""
        health = self._health
        if probes is None:
            probes = {name: self._probes[name] for name in health.down() if name in self._probes}
        for dependency, probe in probes.items():
            try:
                probe()
            except Exception as error:  # noqa: BLE001 (a probe's failure is the finding)
                health.report(error, health.clock())
            else:
                health.succeeded(dependency, health.clock())


class Watch:
    """A loop's view of the tracker: the stores that loop uses, and the tracker's clock.
    It fits the ``StepHealth`` hook of the log followers."""

    def __init__(self, health: DependencyHealth, dependencies: tuple[str, ...]) -> None:
        self._health = health
        self._dependencies = dependencies

    def failed(self, error: BaseException) -> float | None:
        """The pause before the next try if ``error`` means a store is unreachable."""
        return self._health.report(error, self._health.clock())

    def succeeded(self) -> None:
        now = self._health.clock()
        for dependency in self._dependencies:
            self._health.succeeded(dependency, now)
