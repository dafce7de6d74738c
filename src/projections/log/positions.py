"""Where each follower is in the log (the ``Position`` and ``Positions`` ports): a
position is moved in the same transaction as the rows its follower applied, so a page
and the follower's move past it commit together or not at all."""

from typing import Protocol

from jobledger.projections.database import Cursor


class Position(Protocol):
    """The position of one follower (0 before its first page)."""

    def get(self) -> int:
        """The position, read in a transaction of its own."""
        ...

    def read(self, cursor: Cursor) -> int:
        """The position, read in the transaction of ``cursor``."""
        ...

    def write(self, cursor: Cursor, position: int) -> None:
        """Move the follower to ``position`` (made if missing) with what ``cursor``
        writes."""
        ...

    def lock(self, cursor: Cursor) -> None:
        """Hold the position until the transaction ends: appliers of the same follower
        in other processes wait here."""
        ...

    def claim(self, cursor: Cursor, start: int) -> bool:
        """Lock the position; True if it is still ``start`` (nobody applied the page)."""
        ...

    def remove(self, cursor: Cursor) -> None:
        """Forget the follower: it no longer holds the low-water mark back."""
        ...


class Positions(Protocol):
    """Every follower's position, and what concerns them all (the archive's
    low-water mark)."""

    def of(self, name: str) -> Position:
        """The position of the follower called ``name``."""
        ...

    def lock_all(self, cursor: Cursor) -> None:
        """Hold every position until the transaction ends: a follower's page waits for
        it, and it waits for the pages under way."""
        ...

    def lowest(self, cursor: Cursor) -> tuple[str, int] | None:
        """(name, position) of the follower furthest behind (by name among equals);
        None while there is none."""
        ...
