"""The dependency-health tracker: which errors are outages, the back-off, one line per
outage edge, and the gauge."""

import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, cast

import psycopg
import pytest
import redis
from eventsourcing import persistence
from eventsourcing.domain import Aggregate
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge
from psycopg import errors as pg_errors
from structlog.testing import capture_logs

from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import (
    POSTGRESQL,
    REDIS,
    Backoff,
    DependencyHealth,
    OutageProbe,
    dependency_of,
)
from jobledger.infra.writer import GroupCommitWriter
from jobledger.projections.log.reader import Follower, Wakeup

if TYPE_CHECKING:
    from jobledger.persistence.ledger import Ledger


def wrapped(cause: Exception) -> persistence.OperationalError:
    """What eventsourcing raises: its own class, the driver's error as the cause."""
    error = persistence.OperationalError(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "dependency"),
    [
        (redis.ConnectionError("Error 111 connecting"), REDIS),
        (redis.TimeoutError("Timeout reading"), REDIS),
        (redis.BusyLoadingError("loading the dataset"), REDIS),
        (psycopg.OperationalError("connection refused"), POSTGRESQL),
        (pg_errors.AdminShutdown("terminating connection"), POSTGRESQL),
        (psycopg.InterfaceError("the connection is closed"), POSTGRESQL),
        (wrapped(psycopg.OperationalError("refused")), POSTGRESQL),
        (persistence.InterfaceError("closed"), POSTGRESQL),
        (pg_errors.CannotConnectNow("the database system is starting up"), POSTGRESQL),
        (pg_errors.TooManyConnections("too many clients already"), POSTGRESQL),
        (pg_errors.LockNotAvailable("lock timeout"), None),
        (pg_errors.QueryCanceled("statement timeout"), None),
        (wrapped(pg_errors.LockNotAvailable("lock timeout")), None),
        (wrapped(sqlite3.OperationalError("database is locked")), None),
        (redis.ResponseError("WRONGTYPE"), None),
        (psycopg.errors.UniqueViolation("duplicate key"), None),
        (ValueError("a bug"), None),
    ],
)
def test_only_unreachable_store_errors_name_a_dependency(
    error: Exception, dependency: str | None
) -> None:
    """If an error means a store cannot be reached (in the driver's class or in
    eventsourcing's wrapper), then it names that store; any other error names none."""
    assert dependency_of(error) == dependency


@given(failures=st.integers(min_value=1, max_value=200), rand=st.floats(0, 1, exclude_max=True))
def test_the_backoff_grows_is_capped_and_jittered(failures: int, rand: float) -> None:
    """If a store keeps failing, then each pause lies between half and all of
    min(cap, initial * 2**(n-1)), so it grows, never passes the cap, and is spread."""
    backoff = Backoff(initial=0.1, cap=5.0)
    ceiling = min(5.0, 0.1 * 2 ** (failures - 1))
    assert ceiling / 2 <= backoff.delay(failures, rand) <= ceiling
    assert backoff.delay(failures, 0.0) <= backoff.delay(failures + 1, 0.0)


def gauge_value(metrics: Metrics, dependency: str) -> float | None:
    return metrics.registry.get_sample_value("jobledger_dependency_up", {"dependency": dependency})


def test_an_outage_is_said_once_when_it_starts_and_once_when_it_ends() -> None:
    """If Redis fails ten times in a row and then answers, then the tracker logs one
    dependency.down and one dependency.up with the outage's length, the gauge goes 1, 0,
    1, and successes outside an outage log nothing."""
    metrics = Metrics()
    health = DependencyHealth("worker", gauge=metrics.dependency_up, rand=lambda: 0.5)
    health.expect(REDIS, POSTGRESQL)
    assert gauge_value(metrics, REDIS) == 1
    with capture_logs() as logs:
        health.succeeded(REDIS, 99.0)
        pauses = [
            health.failed(REDIS, redis.ConnectionError("refused"), 100.0 + n) for n in range(10)
        ]
        assert gauge_value(metrics, REDIS) == 0
        assert gauge_value(metrics, POSTGRESQL) == 1
        assert health.down() == {REDIS: "ConnectionError: refused"}
        health.succeeded(REDIS, 112.5)
        health.succeeded(REDIS, 113.0)
    assert gauge_value(metrics, REDIS) == 1
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("dependency.down", "warning"),
        ("dependency.up", "info"),
    ]
    assert (logs[0]["dependency"], logs[0]["role"]) == (REDIS, "worker")
    assert logs[1]["outage_seconds"] == 12.5
    assert logs[1]["failures"] == 10
    assert pauses == sorted(pauses)
    assert pauses[-1] == 0.75 * 2.0  # capped, with the jitter's midpoint
    assert health.down() == {}


def test_an_error_that_is_no_outage_is_left_to_the_caller() -> None:
    """If an error does not mean a store is unreachable, then ``report`` says so (None)
    and the tracker neither logs nor changes the gauge."""
    registry = CollectorRegistry()
    gauge = Gauge("up", "up", ["dependency"], registry=registry)
    health = DependencyHealth("api", gauge=gauge)
    with capture_logs() as logs:
        assert health.report(ValueError("a bug"), 1.0) is None
        assert health.report(redis.ConnectionError("gone"), 1.0) is not None
    assert [e["event"] for e in logs] == ["dependency.down"]
    assert health.retry_after() >= 1


def test_a_watch_ends_the_outages_of_its_own_stores_only() -> None:
    """If a loop that only uses PostgreSQL succeeds during a Redis outage, then the Redis
    outage goes on; a loop that uses Redis ends it."""
    now = [10.0]
    health = DependencyHealth("projector", clock=lambda: now[0])
    tables, queue = health.watch(POSTGRESQL), health.watch(POSTGRESQL, REDIS)
    assert queue.failed(redis.ConnectionError("refused")) is not None
    assert tables.failed(ValueError("no outage")) is None
    tables.succeeded()
    assert set(health.down()) == {REDIS}
    now[0] = 14.0
    with capture_logs() as logs:
        queue.succeeded()
    assert health.down() == {}
    assert logs[0]["outage_seconds"] == 4.0


def test_an_outage_of_part_of_a_store_is_said_once() -> None:
    """If one loop keeps failing while another succeeds (a Redis Cluster that lost one
    master: some slots answer, others do not), then the outage goes on and is said
    once; it ends when the failing loop succeeds, or once it stopped trying for the
    longest back-off pause."""
    health = DependencyHealth("scheduler")
    cap = Backoff().cap
    with capture_logs() as logs, ThreadPoolExecutor(max_workers=1) as other_loop:
        for second in range(10):
            other_loop.submit(
                health.failed, REDIS, redis.ConnectionError("refused"), 100.0 + second
            ).result()
            health.succeeded(REDIS, 100.5 + second)
        assert set(health.down()) == {REDIS}
        other_loop.submit(health.succeeded, REDIS, 110.0).result()
        assert health.down() == {}
        other_loop.submit(health.failed, REDIS, redis.ConnectionError("refused"), 120.0).result()
        health.succeeded(REDIS, 120.0 + cap / 2)
        assert set(health.down()) == {REDIS}
        health.succeeded(REDIS, 120.0 + cap)
        assert health.down() == {}
    assert [e["event"] for e in logs] == ["dependency.down", "dependency.up"] * 2


def test_the_probe_ends_an_outage_once_the_store_answers() -> None:
    """If a store is down and its probe fails, then the outage goes on; once the probe
    answers, the outage ends; stores that are up are not probed."""
    health = DependencyHealth("api")
    calls: list[str] = []
    answers = iter([False, True])

    def postgres() -> None:
        calls.append(POSTGRESQL)
        if not next(answers):
            raise psycopg.OperationalError("refused")

    def never() -> None:
        calls.append(REDIS)

    probe = OutageProbe(health, {POSTGRESQL: postgres, REDIS: never})
    health.failed(POSTGRESQL, psycopg.OperationalError("refused"), health.clock())
    probe.probe()
    assert set(health.down()) == {POSTGRESQL}
    probe.probe()
    assert health.down() == {}
    probe.probe()
    assert calls == [POSTGRESQL, POSTGRESQL]


class Note(Aggregate):
    """An aggregate with one pending event: something for the writer to save."""


class FlakyLedger:
    """Refuses ``failures`` saves as an unreachable server would, then saves."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.saved: list[object] = []

    def held_connection(self) -> None:
        return None  # no connection to keep: nothing here is PostgreSQL

    def save_events(self, events: list[object], _held: object = None) -> None:
        if self.failures:
            self.failures -= 1
            raise wrapped(psycopg.OperationalError("connection refused"))
        self.saved.extend(events)

    def snapshot_due(self, _events: list[object]) -> None:
        return None


FAST = Backoff(initial=0.01, cap=0.05)


def test_the_writer_saves_an_outcome_once_the_store_is_back() -> None:
    """If the store refuses a batch three times as an unreachable server would, then the
    writer tries the same batch again until it is saved, and the caller's save succeeds
    instead of losing the outcome; the outage is said once each way."""
    ledger = FlakyLedger(failures=3)
    health = DependencyHealth("worker", backoff=FAST)
    with capture_logs() as logs, GroupCommitWriter(cast("Ledger", ledger), health=health) as writer:
        writer.save(Note(), timeout=5)
    assert len(ledger.saved) == 1
    assert [e["event"] for e in logs] == ["dependency.down", "dependency.up"]
    assert logs[1]["failures"] == 3


def test_a_closing_writer_gives_up_on_an_unreachable_store() -> None:
    """If the store stays unreachable and the writer is closed, then the waiting caller
    hears the error instead of waiting for ever."""
    health = DependencyHealth("worker", backoff=FAST)
    writer = GroupCommitWriter(cast("Ledger", FlakyLedger(failures=10**9)), health=health)
    future = writer.submit(Note())
    time.sleep(0.1)
    writer.close(timeout=5)
    with pytest.raises(persistence.OperationalError):
        future.result(timeout=1)


def run_follower(step: Callable[[], bool], health: DependencyHealth, calls: list[int]) -> None:
    follower = Follower(
        "queue-projection", step, Wakeup(), poll_interval=0.01, health=health.watch(REDIS)
    )
    follower.start()
    deadline = time.monotonic() + 5
    while len(calls) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    follower.stop()


def test_a_follower_reports_an_outage_through_the_tracker() -> None:
    """If a follower's step meets an unreachable Redis three times and then works, then
    the tracker says the outage once each way and the follower logs no step failure; an
    error that is no outage is still logged by the follower."""
    health = DependencyHealth("projector", backoff=FAST)
    calls: list[int] = []

    def step() -> bool:
        calls.append(1)
        if len(calls) <= 3:
            raise redis.ConnectionError("Error 111 connecting")
        if len(calls) == 5:
            raise ValueError("a bug")
        return False

    with capture_logs() as logs:
        run_follower(step, health, calls)
    events = [e["event"] for e in logs]
    assert events == ["dependency.down", "dependency.up", "follower.step_failed"], events


def test_the_idle_probe_notices_an_outage_without_traffic() -> None:
    """If no request comes while Redis goes away, then the probe of every store (what the
    API's probe thread runs when all looks well) finds the outage and says it once."""
    health = DependencyHealth("api")

    def redis_ping() -> None:
        raise redis.ConnectionError("Error 111 connecting")

    probes: dict[str, Callable[[], object]] = {POSTGRESQL: lambda: None, REDIS: redis_ping}
    probe = OutageProbe(health, probes)
    with capture_logs() as logs:
        probe.probe(probes)
        probe.probe(probes)
    assert list(health.down()) == [REDIS]
    assert [e["event"] for e in logs] == ["dependency.down"]
