"""The job schedule index: each job's next fire, folded from job events.

A SQL table beside the event store, updated exactly once per event (rows and position
in one transaction). The scheduler asks it which jobs are due; the Job aggregate stays
the authority, so a lagging index can only cause a wasted look, never a wrong fire.
"""

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from jobledger.domain.job import Job
from jobledger.domain.topics import event_topics
from jobledger.persistence.ledger import Ledger
from jobledger.projections.database import Database, upsert
from jobledger.projections.log.positions import Position
from jobledger.projections.log.reader import LogReader, LogRow
from jobledger.projections.quarantine import JOB_SCHEDULE_FOLLOWER, Isolation
from jobledger.projections.times import from_ms, to_ms

POSITION = "job-schedule"
JOB_TOPICS = event_topics(Job)
_UPSERT = upsert(
    "jobledger_job_schedule",
    ("job_id", "next_fire_at_ms", "version"),
    "ON CONFLICT (job_id) DO UPDATE SET next_fire_at_ms = excluded.next_fire_at_ms, "
    "version = excluded.version WHERE excluded.version > jobledger_job_schedule.version",
)
_VERSION_ONLY = "UPDATE jobledger_job_schedule SET version = ? WHERE job_id = ? AND version < ?"


# (start, rows, end) of a page of job events the index read: see ``catch_up``.
PageObserver = Callable[[int, Sequence[LogRow], int], None]


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
        database: Database,
        *,
        page_size: int = 2000,
        isolation: Isolation | None = None,
    ) -> None:
        self._reader = LogReader(ledger, page_size, topics=JOB_TOPICS)
        self._database = database
        self._position = Position(database, POSITION)
        self.isolation = isolation or Isolation(JOB_SCHEDULE_FOLLOWER)

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
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(
                "SELECT job_id FROM jobledger_job_schedule WHERE next_fire_at_ms <= ? "
                "ORDER BY next_fire_at_ms LIMIT ?",
                (to_ms(now), limit),
            )
            rows = cursor.fetchmany(limit)
        return [UUID(row[0]) for row in rows]

    def next_due(self) -> datetime | None:
        """When the next job is due, as far as the index knows."""
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute("SELECT min(next_fire_at_ms) FROM jobledger_job_schedule")
            row = cursor.fetchone()
        return None if row is None or row[0] is None else from_ms(int(row[0]))

    def position(self) -> int:
        return self._position.get()

    def _commit(self, events: Iterable[Any], position: int | None) -> None:
        # One row per job, its last event's: one statement writes the whole page, and it
        # may change each row only once (the version guard keeps the newest anyway).
        latest: dict[str, tuple[str, int | None, int]] = {}
        for domain_event in events:
            sets, next_fire = next_fire_of(domain_event)
            if sets:
                job_id = str(domain_event.originator_id)
                next_ms = None if next_fire is None else to_ms(next_fire)
                latest[job_id] = (job_id, next_ms, domain_event.originator_version)
        with self._database.transaction() as cursor:
            cursor.write_rows(_UPSERT, list(latest.values()))
            if position is not None:
                self._position.write(cursor, position)
