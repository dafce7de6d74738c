"""The job schedule index: each job's next fire, folded from job events.

A table beside the event store (``ScheduleTable``), updated exactly once per event
(rows and position in one transaction). The scheduler asks it which jobs are due; the
Job aggregate stays the authority, so a lagging index can only cause a wasted look,
never a wrong fire.
"""

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from jobledger.domain.job import Job
from jobledger.domain.topics import event_topics
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import JOB_SCHEDULE_FOLLOWER, Isolation

POSITION = "job-schedule"
JOB_TOPICS = event_topics(Job)
# While pages hold no job event, the index keeps its position in memory and writes it at
# most this often (seconds): a leader's every tick need not be a write.
POSITION_EVERY = 1.0


# (start, rows, end) of a page of job events the index read: see ``catch_up``.
PageObserver = Callable[[int, Sequence[LogRow], int], None]


class NextFire(NamedTuple):
    """A job's next fire (None: never) as of its event ``version``."""

    job_id: UUID
    at: datetime | None
    version: int


class ScheduleTable(Protocol):
    """Each job's next fire, and the position of the log it was folded to."""

    def position(self) -> int: ...

    def commit(self, next_fires: Sequence[NextFire], position: int | None) -> None:
        """Keep each job's next fire unless the table has it from a newer version, and
        move the position (unless None), in one transaction. A job appears at most once."""
        ...

    def due(self, now: datetime, *, limit: int) -> list[UUID]:
        """Up to ``limit`` jobs due at ``now``, the earliest first."""
        ...

    def next_due(self) -> datetime | None:
        """The earliest next fire of all."""
        ...


def next_fire_of(domain_event: Any) -> tuple[bool, datetime | None]:  # noqa: ANN401 (any job event)
    """(whether the event sets the next fire, and to what)."""
    if isinstance(domain_event, Job.Paused | Job.Deleted):
        return True, None
    if isinstance(domain_event, Job.Triggered | Job.Backfilled):
        return False, None  # a manual run or a backfill request leaves the schedule as it was
    return True, domain_event.next_fire_at


class JobIndex:
    """Reads and follows the job schedule table."""

    def __init__(
        self,
        ledger: Ledger,
        table: ScheduleTable,
        *,
        page_size: int = 2000,
        isolation: Isolation | None = None,
    ) -> None:
        self._reader = LogReader(ledger, page_size, topics=JOB_TOPICS)
        self._table = table
        self.isolation = isolation or Isolation(JOB_SCHEDULE_FOLLOWER)
        # The position as far as this index has read, and when (monotonic) it last wrote
        # it: None until read from the table, and after ``forget``.
        self._position: int | None = None
        self._written_at = 0.0

    def catch_up(self, observe: PageObserver | None = None) -> int:
        """Apply every job event not yet in the index; returns how many were read.

        ``observe`` hears of every page read, before it is applied: where it starts,
        its rows (an event the index then isolates among them) and where it ends; the
        last page, with nothing new, starts and ends where the index stands.
        """
        applied = 0
        while True:
            position = self.position()
            page = self._reader.rows(position)
            if observe is not None:
                observe(position, page.rows, page.position)
            if page.position == position:
                return applied
            self.isolation.apply(page, position, self._commit_rows)
            applied += len(page.rows)

    def _commit_rows(self, rows: Sequence[LogRow], _start: int, position: int) -> bool:
        self._commit(self._reader.events(rows), position)
        return True

    def apply_one(self, row: LogRow) -> None:
        """Apply one job event without moving the position (a retry)."""
        self._commit([self._reader.event(row)], None)

    def due(self, now: datetime, *, limit: int) -> list[UUID]:
        return self._table.due(now, limit=limit)

    def next_due(self) -> datetime | None:
        """When the next job is due, as far as the index knows."""
        return self._table.next_due()

    def position(self) -> int:
        if self._position is None:
            self._position = self._table.position()
        return self._position

    def forget(self) -> None:
        """Read the position from the table again (another scheduler may have moved it
        while this one did not lead). Reading a page again is harmless: the table keeps
        each job's newest version."""
        self._position = None

    def _commit(self, events: Iterable[Any], position: int | None) -> None:
        # One row per job, its last event's: one statement writes the whole page, and it
        # may change each row only once (the version guard keeps the newest anyway).
        latest: dict[str, NextFire] = {}
        for domain_event in events:
            sets, next_fire = next_fire_of(domain_event)
            if sets:
                job_id = domain_event.originator_id
                fire = NextFire(job_id, next_fire, domain_event.originator_version)
                latest[str(job_id)] = fire
        if position is None:
            self._table.commit(list(latest.values()), None)
            return
        moment = time.monotonic()
        if latest or moment - self._written_at >= POSITION_EVERY:
            self._table.commit(list(latest.values()), position)
            self._written_at = moment
        self._position = position
