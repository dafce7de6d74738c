"""The leader epoch counter in the event store's database (migration 0007)."""

from jobledger.infra.errors import StoreNotMigratedError
from jobledger.projections.database import Database

_EPOCH_TABLE = "jobledger_leader_epoch"


class StoredEpochs:
    """The epoch counter in the event store's database (migration 0007): as durable as
    the log, so the epochs recorded in it only grow, whatever Redis loses."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def next_epoch(self, above: int = 0) -> int:
        with self._database.transaction() as cursor:
            cursor.execute(
                f"UPDATE {_EPOCH_TABLE} "  # noqa: S608 (a constant name)
                "SET epoch = CASE WHEN epoch > ? THEN epoch ELSE ? END + 1 RETURNING epoch",
                (above, above),
            )
            row = cursor.fetchone()
        return _epoch_of(row)

    def latest_epoch(self) -> int:
        with self._database.transaction(snapshot=True) as cursor:
            cursor.execute(f"SELECT epoch FROM {_EPOCH_TABLE}")  # noqa: S608 (a constant name)
            row = cursor.fetchone()
        return _epoch_of(row)


def _epoch_of(row: tuple[object, ...] | None) -> int:
    if row is None:
        # The migration inserts the row; without it no epoch can be trusted.
        raise StoreNotMigratedError
    return int(str(row[0]))
