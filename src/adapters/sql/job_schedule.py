"""The ``jobledger_job_schedule`` table: each job's next fire in integer milliseconds,
and the index's position, moved in the same transaction as the rows."""

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from jobledger.adapters.sql.positions import SqlPosition
from jobledger.projections.database import Database, upsert
from jobledger.projections.read_models.job_index import POSITION, NextFire
from jobledger.projections.times import from_ms, to_ms

_UPSERT = upsert(
    "jobledger_job_schedule",
    ("job_id", "next_fire_at_ms", "version"),
    "ON CONFLICT (job_id) DO UPDATE SET next_fire_at_ms = excluded.next_fire_at_ms, "
    "version = excluded.version WHERE excluded.version > jobledger_job_schedule.version",
)
_DUE = (
    "SELECT job_id FROM jobledger_job_schedule WHERE next_fire_at_ms <= ? "
    "ORDER BY next_fire_at_ms LIMIT ?"
)


class SqlJobSchedule:
    """The job schedule table (``ScheduleTable``) on the event store's database."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._position = SqlPosition(database, POSITION)

    def position(self) -> int:
        return self._position.get()

    def commit(self, next_fires: Sequence[NextFire], position: int | None) -> None:
        rows = [
            (str(fire.job_id), None if fire.at is None else to_ms(fire.at), fire.version)
            for fire in next_fires
        ]
        with self._database.transaction() as cursor:
            cursor.write_rows(_UPSERT, rows)
            if position is not None:
                self._position.write(cursor, position)

    def due(self, now: datetime, *, limit: int) -> list[UUID]:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(_DUE, (to_ms(now), limit))
            rows = cursor.fetchmany(limit)
        return [UUID(row[0]) for row in rows]

    def next_due(self) -> datetime | None:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute("SELECT min(next_fire_at_ms) FROM jobledger_job_schedule")
            row = cursor.fetchone()
        return None if row is None or row[0] is None else from_ms(int(row[0]))
