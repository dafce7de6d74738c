"""Leader epochs come from the event store: Redis losing its data never makes them repeat
or go backwards (ADR 9)."""

import itertools
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
import structlog
from tests.conftest import actor

from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.leadership import LeaderTiming, RedisLeadership
from jobledger.adapters.sql.epochs import StoredEpochs
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.errors import StoreNotMigratedError
from jobledger.infra.leadership import LocalLeadership
from jobledger.infra.settings import Settings, load_settings
from jobledger.runtime.scheduler import SchedulerService
from jobledger.services.jobs import Jobs

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
EPOCH_MIGRATION = "0007_leader_epoch.sql"


@pytest.fixture
def pair(
    postgres_url: str, redis_client: redis.Redis, redis_server: str
) -> Iterator[list[Container]]:
    """Two scheduler processes' containers on one PostgreSQL store and one (emptied)
    private Redis."""
    del redis_client  # emptied the server
    settings = load_settings(
        {}, database_url=postgres_url, redis_url=redis_server, redis_prefix="epochs"
    )
    with bootstrap(settings) as first, bootstrap(settings) as second:
        yield [first, second]


def minutely_jobs(container: Container, count: int) -> list[Job]:
    return [
        Jobs(container.ledger).schedule(
            JobDefinition(
                name=f"minutely {n}",
                spec=ExecutionSpec(handler="test.echo"),
                schedule=CronSchedule("* * * * *"),
            ),
            at=T0 - timedelta(seconds=30),
            by=actor("test"),
        )
        for n in range(count)
    ]


def fired_epochs(container: Container) -> list[tuple[uuid.UUID, datetime, int]]:
    """(job, scheduled_for, leader_epoch) of every JobFired, in log order."""
    notifications = container.ledger.recorder.select_notifications(
        start=1, limit=1_000_000, topics=[Job.Fired.TOPIC]
    )
    events = (vars(container.ledger.mapper.to_domain_event(n)) for n in notifications)
    return [(e["originator_id"], e["scheduled_for"], e["leader_epoch"]) for e in events]


def test_epochs_grow_across_leaderships_with_a_flushall_between(
    pair: list[Container], redis_client: redis.Redis
) -> None:
    """If Redis loses everything (FLUSHALL) between leaderships, then each new leader
    still fires under a higher epoch than every fire before it, and no two leaders share
    one."""
    minutely_jobs(pair[0], 5)
    a, b = (c.scheduler() for c in pair)
    a.leadership.tick()
    assert a.leadership.is_leader()
    assert a.tick(T0 + timedelta(seconds=1)).fired == 5
    redis_client.flushall()  # the lock and Redis's copy of the epoch are gone
    b.leadership.tick()
    a.leadership.tick()
    assert b.leadership.is_leader()
    assert not a.leadership.is_leader()
    assert b.tick(T0 + timedelta(minutes=1, seconds=1)).fired == 5
    b.leadership.release()
    redis_client.flushall()
    deadline = time.monotonic() + 2  # a waits one poll interval between tries
    while not a.leadership.is_leader() and time.monotonic() < deadline:
        a.leadership.tick()
        time.sleep(0.05)
    assert a.leadership.is_leader()
    assert a.tick(T0 + timedelta(minutes=2, seconds=1)).fired == 5
    epochs = [epoch for _job, _at, epoch in fired_epochs(pair[0])]
    leaderships = [epoch for epoch, _ in itertools.groupby(epochs)]
    assert len(epochs) == 15
    assert len(leaderships) == 3
    assert leaderships == sorted(set(leaderships))  # strictly growing, in log order


def test_a_leader_whose_lock_vanished_yields_to_the_next_at_its_next_tick(
    pair: list[Container], redis_client: redis.Redis
) -> None:
    """If Redis loses the lock and another scheduler wins it, then the old leader stops
    at its next tick (it sees a later epoch in the store), before its renewal is due, so
    two leaders do not act side by side until then."""
    keys = Keys("epochs")
    timing = LeaderTiming(ttl=3.0, renew_every=1.0, poll=0.5)
    clock = {"a": 0.0, "b": 0.0}
    epochs = [StoredEpochs(c.database) for c in pair]
    a = RedisLeadership(redis_client, keys, epochs[0], timing=timing, clock=lambda: clock["a"])
    b = RedisLeadership(redis_client, keys, epochs[1], timing=timing, clock=lambda: clock["b"])
    a.tick()
    assert a.is_leader()
    redis_client.flushall()
    b.tick()
    assert b.is_leader()
    assert b.epoch > a.epoch
    assert redis_client.get(keys.leader_epoch) == str(b.epoch).encode()
    clock["a"] += 0.05  # one scheduler tick later: a's renewal is not due for a second
    a.tick()
    assert not a.is_leader()


class HungOnce:
    """The store's epochs, whose first hand-out hangs ``seconds`` on a scripted clock."""

    def __init__(self, epochs: StoredEpochs, clock: list[float], seconds: float) -> None:
        self._epochs = epochs
        self._clock = clock
        self._hang = seconds

    def next_epoch(self, above: int = 0) -> int:
        self._clock[0] += self._hang
        self._hang = 0.0
        return self._epochs.next_epoch(above)

    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch()


def test_a_win_that_came_late_is_not_a_leadership_that_ends_at_once(
    pair: list[Container], redis_client: redis.Redis
) -> None:
    """If winning the lock took longer than a renewal round (the store hung for 10 s
    while the epoch was taken), then the scheduler does not lead on a deadline already
    past, to step down one tick later and leave its own lock blocking every election
    for its ttl: it hands the lock back and wins it at its next tick, elected once."""
    keys = Keys("epochs")
    timing = LeaderTiming(ttl=3.0, renew_every=1.0, poll=0.5)
    clock = [0.0]
    epochs = HungOnce(StoredEpochs(pair[0].database), clock, 10.0)
    leadership = RedisLeadership(redis_client, keys, epochs, timing=timing, clock=lambda: clock[0])
    leadership.tick()
    assert not leadership.is_leader()
    for _ in range(3):
        clock[0] += 0.05  # the scheduler's ticks
        leadership.tick()
        assert leadership.is_leader()
    assert leadership.changes == 1  # elected once, never stepped down


def test_a_lock_that_holds_our_token_is_ours_at_the_next_try(
    pair: list[Container], redis_client: redis.Redis
) -> None:
    """If the lock holds this scheduler's token while it does not lead (its try timed
    out on a frozen Redis, which set the lock once it went on), then its next try wins
    the lock at once instead of waiting out the lock's ttl with no leader."""
    keys = Keys("epochs")
    leadership = RedisLeadership(redis_client, keys, StoredEpochs(pair[0].database))
    redis_client.set(keys.leader, leadership.token, px=3000)
    leadership.tick()
    assert leadership.is_leader()
    assert 2000 < int(redis_client.pttl(keys.leader)) <= 3000


def test_an_epoch_counted_in_redis_by_an_older_release_is_passed(
    pair: list[Container], redis_client: redis.Redis
) -> None:
    """If Redis holds a higher epoch than the store (a scheduler of an older release
    counted there during an upgrade), then the next leader takes an epoch above it."""
    redis_client.set(Keys("epochs").leader_epoch, 57)
    scheduler = pair[0].scheduler()
    scheduler.leadership.tick()
    assert scheduler.leadership.is_leader()
    assert scheduler.leadership.epoch == 58
    assert StoredEpochs(pair[1].database).latest_epoch() == 58


def test_no_leader_without_a_stored_epoch(pair: list[Container], redis_client: redis.Redis) -> None:
    """If the store cannot hand out an epoch, then the scheduler that won the lock hands
    it back and does not lead, so it never fires under an epoch that could repeat."""

    class Unavailable:
        def next_epoch(self, above: int = 0) -> int:
            raise OSError(f"connection refused (above {above})")

        def latest_epoch(self) -> int:
            raise OSError("connection refused")

    keys = Keys("epochs")
    leadership = RedisLeadership(redis_client, keys, Unavailable())
    leadership.tick()
    assert not leadership.is_leader()
    assert redis_client.get(keys.leader) is None
    other = pair[1].scheduler()
    other.leadership.tick()
    assert other.leadership.is_leader()


def fast_clock(start: float) -> datetime:
    """A minute of schedule per real second, so every job is due about once a second."""
    return T0 + timedelta(minutes=time.monotonic() - start)


def run_flushing(services: list[SchedulerService], client: redis.Redis, flushes: int) -> None:
    """Run the scheduler loops in threads while Redis is flushed every 0.7 s."""
    for service in services:
        service.start()
    for _ in range(flushes):
        time.sleep(0.7)
        client.flushall()
    time.sleep(0.7)
    for service in services:
        service.stop()


def test_two_schedulers_never_share_an_epoch_while_redis_is_flushed(
    pair: list[Container], redis_client: redis.Redis
) -> None:
    """If two scheduler loops run while Redis is flushed again and again, then every
    leadership has its own epoch, every fire carries the epoch of a leadership, and no
    occurrence fires twice."""
    minutely_jobs(pair[0], 20)
    start = time.monotonic()
    services = [SchedulerService(c.scheduler(), now=lambda: fast_clock(start)) for c in pair]
    with structlog.testing.capture_logs() as logs:
        run_flushing(services, redis_client, flushes=6)
    elected = [e["leader_epoch"] for e in logs if e["event"] == "leader.elected"]
    assert len(elected) >= 3
    assert len(set(elected)) == len(elected)  # no epoch was handed to two leaderships
    fires = fired_epochs(pair[0])
    assert len(fires) >= 20
    assert {epoch for _, _, epoch in fires} <= set(elected)
    assert len({(job, at) for job, at, _ in fires}) == len(fires)


class FixedEpoch:
    """An epoch source that always answers one number (a store from an older release)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def next_epoch(self, above: int = 0) -> int:
        return max(self.epoch, above + 1)

    def latest_epoch(self) -> int:
        return self.epoch


def test_the_counter_starts_above_the_epochs_already_in_the_log(store_settings: Settings) -> None:
    """If a store's log already holds fires under epoch 41 when the epoch counter is
    created (an upgrade from a release that counted in Redis), then the next leader
    takes 42, on either backend."""
    with bootstrap(store_settings) as container:
        minutely_jobs(container, 1)
        container.scheduler(LocalLeadership(FixedEpoch(41))).tick(T0 + timedelta(seconds=1))
        with container.database.transaction() as cursor:
            cursor.execute("DROP TABLE jobledger_leader_epoch")
            cursor.execute("DELETE FROM jobledger_migrations WHERE name = ?", (EPOCH_MIGRATION,))
        with pytest.raises(StoreNotMigratedError):
            container.scheduler()
    migrate(store_settings, progress=lambda _: None)
    with bootstrap(store_settings) as container:
        assert StoredEpochs(container.database).next_epoch() == 42


def test_each_embedded_run_fires_under_a_higher_epoch(sqlite_url: str) -> None:
    """If `jobledger dev` runs twice on one data folder, then the second run fires under a
    higher epoch than the first (the embedded mode takes its epoch from the store too)."""
    settings = load_settings({}, database_url=sqlite_url)
    for run in range(3):
        with bootstrap(settings) as container:
            if run == 0:
                minutely_jobs(container, 2)
            scheduler = container.scheduler()
            scheduler.leadership.tick()
            assert scheduler.tick(T0 + timedelta(minutes=run, seconds=1)).fired == 2
            epochs = [epoch for _job, _at, epoch in fired_epochs(container)]
            # The system view shows the epoch the running process fires under.
            assert container.leader_status() == ("embedded", scheduler.leadership.epoch)
    leaderships = [epoch for epoch, _ in itertools.groupby(epochs)]
    assert len(leaderships) == 3
    assert leaderships == sorted(set(leaderships))
