"""The outbox table on PostgreSQL (ADR "transactional enqueue"): the rows a relay takes,
locked so that no other relay takes them, and settled in the transaction that locked
them."""

from collections.abc import Callable, Mapping
from typing import Any

from jobledger.projections.database import Cursor, Database
from jobledger.schemas.outbox import OUTBOX_TABLE, OutboxRow

_SELECT = (
    f"SELECT id, idempotency_key, run FROM {OUTBOX_TABLE} WHERE refused IS NULL "  # noqa: S608 (constant names)
    "ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"
)
_DELETE = f"DELETE FROM {OUTBOX_TABLE} WHERE id = ?"  # noqa: S608 (constant names)
_REFUSE = f"UPDATE {OUTBOX_TABLE} SET refused = ? WHERE id = ?"  # noqa: S608 (constant names)


class PostgresOutbox:
    """The outbox rows (``services.outbox.OutboxStore``) in the event store's database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def take(self, limit: int, handle: Callable[[list[OutboxRow]], Mapping[int, str]]) -> None:
        # SKIP LOCKED: several relays never take the same row, nor wait for each other.
        with self._database.transaction() as cursor:
            cursor.execute(_SELECT, (limit,))
            rows = [OutboxRow(int(r[0]), str(r[1]), str(r[2])) for r in cursor.fetchmany(limit)]
            if rows:
                _settle(cursor, rows, handle(rows))


def _settle(cursor: Cursor, rows: list[OutboxRow], refused: Mapping[int, str]) -> None:
    done = [(row.id,) for row in rows if row.id not in refused]
    if done:
        cursor.executemany(_DELETE, done)
    if refused:
        marked: list[tuple[Any, ...]] = [(error, row_id) for row_id, error in refused.items()]
        cursor.executemany(_REFUSE, marked)
