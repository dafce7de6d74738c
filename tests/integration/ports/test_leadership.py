"""The leadership ports' contracts (``infra.leadership``), run on every backend.

``EpochSource``: the epoch counter in the event store (``StoredEpochs``) on PostgreSQL
and on SQLite hands out epochs that never repeat and never go back, above any epoch
seen elsewhere. ``Leadership``: the embedded mode's (``LocalLeadership``) and the Redis
election (``RedisLeadership``, on one server and on a cluster) promise a single process
the same: it leads from its first tick, under an epoch of its own from the store, keeps
it while it runs, and leads under a higher one when it starts again.
"""

import threading
from collections.abc import Callable

import pytest
from tests.integration.ports.backends import redis_under_a_prefix
from tests.integration.queue_backends import REDIS_BACKENDS

from jobledger.adapters.redis.leadership import LeaderTiming, RedisLeadership
from jobledger.adapters.sql.epochs import StoredEpochs
from jobledger.adapters.store import projection_database
from jobledger.infra.errors import StoreNotMigratedError
from jobledger.infra.leadership import EpochSource, Leadership, LocalLeadership
from jobledger.infra.settings import Settings
from jobledger.projections.database import Database

TIMING = LeaderTiming(ttl=3.0, renew_every=1.0, poll=0.5)

# A leadership over an epoch source, on the monotonic clock given (seconds).
LeadershipOn = Callable[[EpochSource, Callable[[], float]], Leadership]


@pytest.fixture
def epochs(module_database: Database) -> StoredEpochs:
    return StoredEpochs(module_database)


@pytest.fixture(params=["local", *REDIS_BACKENDS])
def leadership_on(request: pytest.FixtureRequest) -> LeadershipOn:
    """The embedded mode's leadership, or the Redis election."""
    if request.param == "local":
        return lambda epochs, _clock: LocalLeadership(epochs)
    client, keys = redis_under_a_prefix(request)
    return lambda epochs, clock: RedisLeadership(client, keys, epochs, timing=TIMING, clock=clock)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- epochs ----------------------------------------------------------------------------


def test_each_epoch_handed_out_is_above_the_ones_before(epochs: EpochSource) -> None:
    """If epochs are taken one after another, then each is above the one before, and
    the latest epoch is the last one taken; reading it takes none."""
    start = epochs.latest_epoch()
    taken = [epochs.next_epoch() for _ in range(5)]
    assert [start, *taken] == sorted({start, *taken})  # strictly growing
    assert epochs.latest_epoch() == epochs.latest_epoch() == taken[-1]


def test_an_epoch_is_above_the_one_seen_elsewhere_and_never_goes_back(
    epochs: EpochSource,
) -> None:
    """If an epoch is asked for above one seen elsewhere (higher than the store's), then
    it is above that one; if the one seen is lower than the store's (or 0), then the
    epoch is still above the store's latest, never back to the lower one."""
    seen = epochs.latest_epoch() + 40
    above = epochs.next_epoch(seen)
    assert above > seen
    assert epochs.latest_epoch() == above
    after = epochs.next_epoch(seen - 20)
    assert after > above
    assert epochs.next_epoch(0) > after
    assert epochs.latest_epoch() > after


def test_processes_taking_epochs_at_once_never_share_one(
    module_store: Settings, epochs: EpochSource
) -> None:
    """If two processes (two databases on one store) take epochs from four threads at
    once, then every epoch handed out is different, all are above the latest before,
    and the latest after is the highest of them."""
    start = epochs.latest_epoch()
    other = projection_database(module_store)
    sources = [epochs, StoredEpochs(other)]
    taken: list[int] = []
    lock = threading.Lock()

    def take(source: EpochSource) -> None:
        mine = [source.next_epoch(start if n % 2 else 0) for n in range(10)]
        with lock:
            taken.extend(mine)

    threads = [threading.Thread(target=take, args=(sources[n % 2],)) for n in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        other.close()
    assert len(taken) == len(set(taken)) == 40
    assert min(taken) > start
    assert epochs.latest_epoch() == max(taken)


def test_without_its_counter_a_store_hands_out_no_epoch(
    module_database: Database, epochs: EpochSource
) -> None:
    """If the counter's row is missing from the store (a store not migrated to it),
    then taking or reading an epoch raises StoreNotMigratedError, not some epoch."""
    latest = epochs.latest_epoch()
    with module_database.transaction() as cursor:
        cursor.execute("DELETE FROM jobledger_leader_epoch")
    try:
        with pytest.raises(StoreNotMigratedError):
            epochs.next_epoch()
        with pytest.raises(StoreNotMigratedError):
            epochs.latest_epoch()
    finally:
        with module_database.transaction() as cursor:
            cursor.execute("INSERT INTO jobledger_leader_epoch (epoch) VALUES (?)", (latest,))
    assert epochs.latest_epoch() == latest


# ---- leadership of a single process ----------------------------------------------------


def test_a_single_process_leads_from_its_first_tick_under_an_epoch_of_its_own(
    leadership_on: LeadershipOn, epochs: EpochSource
) -> None:
    """If one process ticks for the first time, then it leads, under an epoch above
    every one the store handed out before, the store's latest."""
    earlier = epochs.next_epoch()  # an earlier leader's
    leadership = leadership_on(epochs, Clock())
    leadership.tick()
    assert leadership.is_leader()
    assert leadership.epoch > earlier
    assert leadership.epoch == epochs.latest_epoch()


def test_a_leader_that_keeps_ticking_keeps_leading_under_its_epoch(
    leadership_on: LeadershipOn, epochs: EpochSource
) -> None:
    """If the only process goes on ticking (renewing where there is a lock to renew),
    then it leads at every tick, under the same epoch, takes no other from the store,
    and its count of leadership changes does not move."""
    clock = Clock()
    leadership = leadership_on(epochs, clock)
    leadership.tick()
    epoch, changes = leadership.epoch, leadership.changes
    for _ in range(6):
        clock.now += TIMING.renew_every
        leadership.tick()
        assert leadership.is_leader()
        assert (leadership.epoch, leadership.changes) == (epoch, changes)
    assert epochs.latest_epoch() == epoch


def test_a_process_that_starts_again_leads_under_a_higher_epoch(
    leadership_on: LeadershipOn, epochs: EpochSource
) -> None:
    """If the leading process releases its leadership and starts again (a new
    leadership on the same store), then the new one leads at its first tick, under an
    epoch above the one before."""
    first = leadership_on(epochs, Clock())
    first.tick()
    before = first.epoch
    first.release()
    again = leadership_on(epochs, Clock())
    again.tick()
    assert again.is_leader()
    assert again.epoch > before
