"""Where each SQL follower is in the log: one row per follower in jobledger_positions,
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


class Position:
    """The position of the follower called ``name`` (0 before its first page)."""

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
        """Hold the row until the transaction ends: appliers of the same follower in
        other processes wait here."""
        self._locked(cursor)

    def claim(self, cursor: Cursor, start: int) -> bool:
        """Lock the position; True if it is still ``start`` (nobody applied the page)."""
        return self._locked(cursor) == start

    def _locked(self, cursor: Cursor) -> int:
        cursor.execute(_LOCK, (self.name,))
        return fetched(cursor)


def fetched(cursor: Cursor) -> int:
    """The position a ``READ`` just selected (0 if the follower has none yet)."""
    row = cursor.fetchone()
    return 0 if row is None else int(row[0])
