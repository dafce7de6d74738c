"""The leading scheduler's jobs in memory, dropped when the log says they changed.

A tick fires from the Job aggregates it holds instead of loading each due job from
the store, and loads the ones it does not hold in one round trip. The store stays the
authority (ADR 9): a fire from a copy that missed an event of its job collides on the
job's next version and is refused; the scheduler then forgets that copy, and the next
tick loads the job afresh. What keeps such conflicts rare is the job index, which the
leader catches up at the start of every tick: every job event it reads that is newer
than the copy held (an update, a pause, a delete, a fire by another scheduler or by
the releases) drops the copy. The events this scheduler saved itself are no newer
than its copies, so they keep them.

The index's position is shared by every scheduler. If a page of it starts anywhere
but where this cache last stopped, another scheduler read the events in between, and
this one cannot know what they changed: it drops every copy.

A tick takes its jobs out while it works on them and gives each back only once its
save committed (or it had nothing to save): a copy whose commands failed, or whose
save was refused or never answered, is never held again. Used from the tick's
thread only.
"""

from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import Protocol
from uuid import UUID

import structlog

from jobledger.domain.job import Job
from jobledger.persistence.log_store import LogRow

log = structlog.get_logger(__name__)


class JobLoader(Protocol):
    """Where the jobs a cache does not hold come from (the ledger)."""

    def get_jobs(self, job_ids: Collection[UUID]) -> dict[UUID, Job]: ...


class JobCache:
    """Up to ``size`` jobs, the least recently fired dropped first (0: none held)."""

    def __init__(self, ledger: JobLoader, *, size: int) -> None:
        self._ledger = ledger
        self._size = size
        self._jobs: OrderedDict[UUID, Job] = OrderedDict()
        self._through: int | None = None  # where the last page the index read ended
        self.loaded = 0  # jobs loaded from the store so far (tests and benchmarks read it)

    def __len__(self) -> int:
        return len(self._jobs)

    def take(self, job_ids: Collection[UUID]) -> dict[UUID, Job]:
        """The jobs of ``job_ids`` (an id of no job is left out), each taken out of the
        cache until it is given back: those held as they are, the others loaded
        together."""
        jobs = {job_id: job for job_id in job_ids if (job := self._jobs.pop(job_id, None))}
        missing = [job_id for job_id in job_ids if job_id not in jobs]
        if missing:
            found = self._ledger.get_jobs(missing)
            self.loaded += len(found)
            jobs.update(found)
        return jobs

    def preload(self, job_ids: Collection[UUID]) -> None:
        """Load and hold the jobs of ``job_ids`` not held yet (an id of no job is left
        out), as many as the cache's size allows."""
        missing = [job_id for job_id in job_ids if job_id not in self._jobs]
        if missing and self._size > 0:
            for job in self.take(missing[: self._size]).values():
                self.give_back(job)

    def give_back(self, job: Job) -> None:
        """Hold ``job`` again: its save committed, or it had nothing to save."""
        if self._size <= 0:
            return
        self._jobs[job.id] = job
        self._jobs.move_to_end(job.id)
        while len(self._jobs) > self._size:
            self._jobs.popitem(last=False)

    def saw(self, start: int, rows: Sequence[LogRow], end: int) -> None:
        """The job index read ``rows``, the job events from ``start`` to ``end``: drop
        each copy older than one of them, or every copy if events before ``start`` went
        unseen (a ``JobIndex.catch_up`` observer)."""
        if start != self._through:
            self.clear("the job index moved without this scheduler")
        self._through = end
        for _position, originator_id, version, _topic, _state in rows:
            job_id = originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
            job = self._jobs.get(job_id)
            if job is not None and job.version < version:
                del self._jobs[job_id]

    def clear(self, reason: str) -> None:
        """Drop every copy: the next tick loads what it fires."""
        if self._jobs:
            log.info("scheduler.job_cache_cleared", jobs=len(self._jobs), reason=reason)
        self._jobs.clear()
