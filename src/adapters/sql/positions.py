"""The ``jobledger_positions`` table: one row per follower, its position in the log,
moved in the same transaction as the rows it applied."""

from jobledger.projections.database import Cursor, Database

READ = "SELECT position FROM jobledger_positions WHERE name = ?"
_WRITE = (
    "INSERT INTO jobledger_positions (name, position) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET position = excluded.position"
)
# A no-op write of the row, made first if missing: it takes the row's lock, so
# concurrent appliers of a page queue up here, and answers where the follower stands
# once the lock is held (one statement where a lock and a read took three).
_LOCK = (
    "INSERT INTO jobledger_positions (name, position) VALUES (?, 0) "
    "ON CONFLICT (name) DO UPDATE SET position = jobledger_positions.position "
    "RETURNING position"
)
_REMOVE = "DELETE FROM jobledger_positions WHERE name = ?"
# A no-op write on every row: a follower's page, or a rebuild's reset, waits for it.
_LOCK_ALL = "UPDATE jobledger_positions SET position = position"
_LOWEST = "SELECT name, position FROM jobledger_positions ORDER BY position, name LIMIT 1"


class SqlPosition:
    """The position (``Position``) of the follower called ``name``."""

    def __init__(self, database: Database, name: str) -> None:
        self._database = database
        self.name = name

    def get(self) -> int:
        with self._database.transaction(snapshot=True) as cursor:
            return self.read(cursor)

    def read(self, cursor: Cursor) -> int:
        cursor.execute(READ, (self.name,))
        return fetched(cursor)

    def write(self, cursor: Cursor, position: int) -> None:
        cursor.execute(_WRITE, (self.name, position))

    def lock(self, cursor: Cursor) -> None:
        self._locked(cursor)

    def claim(self, cursor: Cursor, start: int) -> bool:
        return self._locked(cursor) == start

    def remove(self, cursor: Cursor) -> None:
        cursor.execute(_REMOVE, (self.name,))

    def _locked(self, cursor: Cursor) -> int:
        cursor.execute(_LOCK, (self.name,))
        return fetched(cursor)


class SqlPositions:
    """Every follower's position (``Positions``) on the event store's database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def of(self, name: str) -> SqlPosition:
        return SqlPosition(self._database, name)

    def lock_all(self, cursor: Cursor) -> None:
        cursor.execute(_LOCK_ALL)

    def lowest(self, cursor: Cursor) -> tuple[str, int] | None:
        cursor.execute(_LOWEST)
        row = cursor.fetchone()
        return None if row is None else (str(row[0]), int(row[1]))


def fetched(cursor: Cursor) -> int:
    """The position a ``READ`` just selected (0 if the follower has none yet)."""
    row = cursor.fetchone()
    return 0 if row is None else int(row[0])
