"""The ``jobledger_quarantine`` table (migration 0006): the events followers could not
apply, one row per follower and log position."""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobledger.persistence.log_store import LogRow
from jobledger.projections.database import Cursor, Database
from jobledger.projections.quarantine import Held, QuarantinedEvent
from jobledger.projections.times import from_ms, to_ms

_COLUMNS = (
    "id, follower, position, originator_id, originator_version, topic, error, "
    "first_seen_ms, last_seen_ms, attempts, dropped_at_ms, dropped_by, dropped_reason"
)
_SELECT = f"SELECT {_COLUMNS} FROM jobledger_quarantine"  # noqa: S608 (constant)
_INHERIT = (
    "INSERT INTO jobledger_quarantine (follower, position, originator_id, originator_version, "
    "topic, error, first_seen_ms, last_seen_ms, attempts) SELECT ?, position, originator_id, "
    "originator_version, topic, error, first_seen_ms, last_seen_ms, 1 FROM jobledger_quarantine "
    "WHERE follower = ? AND position <= ? AND dropped_at_ms IS NULL "
    "ON CONFLICT (follower, position) DO NOTHING"
)
_RECORD = (
    "INSERT INTO jobledger_quarantine (follower, position, originator_id, originator_version, "
    "topic, error, first_seen_ms, last_seen_ms, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1) "
    "ON CONFLICT (follower, position) DO UPDATE SET error = excluded.error, "
    "last_seen_ms = excluded.last_seen_ms, attempts = jobledger_quarantine.attempts + 1"
)
_ATTEMPTS = "SELECT attempts FROM jobledger_quarantine WHERE follower = ? AND position = ?"
_HELD = (
    "SELECT originator_id, min(originator_version) FROM jobledger_quarantine "
    "WHERE follower = ? AND dropped_at_ms IS NULL GROUP BY originator_id"
)
_COUNTS = (
    "SELECT follower, count(*) FROM jobledger_quarantine "
    "WHERE dropped_at_ms IS NULL GROUP BY follower"
)
_DROP = (
    "UPDATE jobledger_quarantine SET dropped_at_ms = ?, dropped_by = ?, "
    "dropped_reason = ? WHERE id = ?"
)
_FAILED_AGAIN = (
    "UPDATE jobledger_quarantine SET error = ?, last_seen_ms = ?, "
    "attempts = attempts + 1 WHERE id = ?"
)


class SqlQuarantineTable:
    """The quarantine table (``QuarantineTable``) on the event store's database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def record(self, follower: str, row: LogRow, error: str, *, at: datetime) -> int:
        position, originator_id, version, topic, _state = row
        ms = to_ms(at)
        values = (follower, position, str(originator_id), version, topic, error, ms, ms)
        with self._database.transaction() as cursor:
            cursor.execute(_RECORD, values)
            cursor.execute(_ATTEMPTS, (follower, position))
            found = cursor.fetchone()
        return 0 if found is None else int(found[0])

    def inherit(self, follower: str, source: str, *, up_to: int) -> None:
        with self._database.transaction() as cursor:
            cursor.execute(_INHERIT, (follower, source, up_to))

    def held(self, follower: str) -> Held:
        rows = self._all(_HELD, (follower,))
        return {str(stream): int(version) for stream, version in rows}

    def events(self, *, follower: str | None, dropped: bool) -> list[QuarantinedEvent]:
        where = f"dropped_at_ms IS {'NOT ' if dropped else ''}NULL"
        params: tuple[str, ...] = ()
        if follower:
            where, params = f"{where} AND follower = ?", (follower,)
        found = self._all(f"{_SELECT} WHERE {where} ORDER BY position, follower", params)
        return [_event(row) for row in found]

    def counts(self) -> dict[str, int]:
        return {str(f): int(n) for f, n in self._all(_COUNTS)}

    def remove(self, event_id: int) -> None:
        with self._database.transaction() as cursor:
            cursor.execute("DELETE FROM jobledger_quarantine WHERE id = ?", (event_id,))

    def mark_dropped(self, event_ids: Sequence[int], *, by: str, reason: str, at: datetime) -> None:
        with self._database.transaction() as cursor:
            cursor.executemany(_DROP, [(to_ms(at), by, reason, event_id) for event_id in event_ids])

    def failed_again(self, event_id: int, error: str, *, at: datetime) -> None:
        with self._database.transaction() as cursor:
            cursor.execute(_FAILED_AGAIN, (error, to_ms(at), event_id))

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(sql, params)
            return _fetch_all(cursor)


def _fetch_all(cursor: Cursor) -> list[Any]:
    rows: list[Any] = []
    while batch := cursor.fetchmany(1000):
        rows += batch
    return rows


def _event(row: Sequence[object]) -> QuarantinedEvent:
    values = dict(zip(_COLUMNS.split(", "), row, strict=True))
    return QuarantinedEvent(
        id=int(str(values["id"])),
        follower=str(values["follower"]),
        position=int(str(values["position"])),
        originator_id=str(values["originator_id"]),
        originator_version=int(str(values["originator_version"])),
        topic=str(values["topic"]),
        error=str(values["error"]),
        first_seen=from_ms(int(str(values["first_seen_ms"]))),
        last_seen=from_ms(int(str(values["last_seen_ms"]))),
        attempts=int(str(values["attempts"])),
        dropped_at=_maybe(values["dropped_at_ms"], lambda v: from_ms(int(str(v)))),
        dropped_by=_maybe(values["dropped_by"], str),
        dropped_reason=_maybe(values["dropped_reason"], str),
    )


_V = TypeVar("_V")


def _maybe(value: object, convert: Callable[[object], _V]) -> _V | None:
    return None if value is None else convert(value)
