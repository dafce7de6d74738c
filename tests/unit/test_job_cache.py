"""The leader's job cache: what it holds, and what the job index's pages make it drop."""

from collections.abc import Collection
from datetime import UTC, datetime
from uuid import UUID, uuid4

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.schedules import CronSchedule
from jobledger.persistence.log_store import LogRow
from jobledger.runtime.job_cache import JobCache

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Store:
    """The jobs as the log has them; counts the loads."""

    def __init__(self, *jobs: Job) -> None:
        self.jobs = {job.id: job for job in jobs}
        self.loads: list[UUID] = []

    def get_jobs(self, job_ids: Collection[UUID]) -> dict[UUID, Job]:
        self.loads += job_ids
        return {i: self.jobs[i] for i in job_ids if i in self.jobs}


def job() -> Job:
    definition = JobDefinition(
        name="cached", spec=ExecutionSpec(handler="test.echo"), schedule=CronSchedule("* * * * *")
    )
    made = Job.schedule(definition, at=T0, by="t")
    made.collect_events()
    return made


def row(position: int, job_id: UUID | str, version: int) -> LogRow:
    return (position, job_id, version, Job.Updated.TOPIC, b"{}")


def test_a_job_given_back_is_taken_again_without_a_load() -> None:
    """If a job is taken and given back, then the next take hands out the same object
    and asks the store only for the jobs it does not hold (an id of no job is left out)."""
    held, other = job(), job()
    store = Store(held, other)
    cache = JobCache(store, size=10)
    first = cache.take([held.id])[held.id]
    cache.give_back(first)
    unknown = uuid4()
    taken = cache.take([held.id, other.id, unknown])
    assert taken[held.id] is first
    assert sorted(taken) == sorted([held.id, other.id])
    assert store.loads == [held.id, other.id, unknown]
    assert cache.loaded == 2


def test_a_job_not_given_back_is_loaded_again() -> None:
    """If a taken job is not given back (its save was refused or never answered), then
    the next take loads it from the store."""
    held = job()
    store = Store(held)
    cache = JobCache(store, size=10)
    cache.take([held.id])
    cache.take([held.id])
    assert store.loads == [held.id, held.id]


def test_an_event_newer_than_the_copy_drops_it() -> None:
    """If the index reads an event of a held job newer than the copy, then the copy is
    dropped; an event no newer than the copy (one this scheduler saved) keeps it."""
    kept, changed = job(), job()
    cache = JobCache(Store(kept, changed), size=10)
    cache.saw(0, [], 0)
    for held in cache.take([kept.id, changed.id]).values():
        cache.give_back(held)
    cache.saw(0, [row(1, kept.id, 1), row(2, changed.id.hex, 2)], 2)
    assert len(cache) == 1
    assert cache.take([kept.id])[kept.id] is kept


def test_a_page_that_starts_elsewhere_drops_every_copy() -> None:
    """If a page of the index starts anywhere but where the last one ended (another
    scheduler read the events between), then every copy is dropped."""
    held = job()
    cache = JobCache(Store(held), size=10)
    cache.saw(0, [], 5)
    cache.give_back(cache.take([held.id])[held.id])
    cache.saw(5, [], 5)
    assert len(cache) == 1
    cache.saw(9, [], 9)
    assert len(cache) == 0


def test_the_size_bounds_what_is_held() -> None:
    """If more jobs are given back than the size, then the least recently given back
    are dropped first; a cache of size 0 holds none."""
    jobs = [job() for _ in range(3)]
    store = Store(*jobs)
    cache = JobCache(store, size=2)
    for taken in cache.take([j.id for j in jobs]).values():
        cache.give_back(taken)
    cache.give_back(cache.take([jobs[0].id])[jobs[0].id])  # loaded again, then held
    assert len(cache) == 2
    store.loads.clear()
    cache.take([j.id for j in jobs])
    assert store.loads == [jobs[1].id]
    off = JobCache(Store(*jobs), size=0)
    off.give_back(jobs[0])
    assert len(off) == 0


def test_a_preload_loads_what_is_not_held_up_to_the_size() -> None:
    """If jobs are preloaded, then the store is asked only for those not held, no more
    than the cache holds are kept, and a later take of them loads nothing."""
    held, first, second = job(), job(), job()
    store = Store(held, first, second)
    cache = JobCache(store, size=2)
    cache.give_back(cache.take([held.id])[held.id])
    cache.preload([held.id, first.id, second.id])
    assert store.loads == [held.id, first.id, second.id]
    assert len(cache) == 2
    loads = len(store.loads)
    assert sorted(cache.take([first.id, second.id])) == sorted([first.id, second.id])
    assert len(store.loads) == loads
