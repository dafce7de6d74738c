"""The ``Position`` and ``Positions`` ports' contract (``projections.log.positions``),
run on both stores through ``SqlPositions``: a position moves with its transaction, a
claim sees whether another applier moved it, the locks make appliers wait, and the
lowest position is the archive's low-water mark.

Each test names followers of its own in a store its module shares."""

import threading
import time
import uuid

import pytest

from jobledger.adapters.sql.positions import SqlPositions
from jobledger.projections.database import Database
from jobledger.projections.log.positions import Position, Positions


class RefusedError(Exception):
    """An error of the test's own, raised inside a transaction."""


@pytest.fixture
def positions(module_database: Database) -> Positions:
    return SqlPositions(module_database)


def write_then_raise(database: Database, position: Position, at: int) -> None:
    with database.transaction() as cursor:
        position.write(cursor, at)
        raise RefusedError


def a_name() -> str:
    return f"follower-{uuid.uuid4().hex[:10]}"


def test_a_follower_starts_at_zero(positions: Positions, module_database: Database) -> None:
    """If a follower has no position yet, then it reads 0, alone or in a transaction."""
    position = positions.of(a_name())
    assert position.get() == 0
    with module_database.transaction() as cursor:
        assert position.read(cursor) == 0


def test_a_written_position_commits_with_its_transaction(
    positions: Positions, module_database: Database
) -> None:
    """If a position is written, then the transaction reads it and, once committed,
    so does every reader; a second write replaces the first."""
    position = positions.of(a_name())
    with module_database.transaction() as cursor:
        position.write(cursor, 12)
        assert position.read(cursor) == 12
    assert position.get() == 12
    with module_database.transaction() as cursor:
        position.write(cursor, 40)
    assert position.get() == 40


def test_a_write_whose_transaction_fails_is_not_kept(
    positions: Positions, module_database: Database
) -> None:
    """If the transaction that moves a position raises, then the position stays."""
    position = positions.of(a_name())
    with module_database.transaction() as cursor:
        position.write(cursor, 3)
    with pytest.raises(RefusedError):
        write_then_raise(module_database, position, 9)
    assert position.get() == 3


def test_followers_have_positions_of_their_own(
    positions: Positions, module_database: Database
) -> None:
    """If one follower moves, then another's position is unchanged."""
    one, other = positions.of(a_name()), positions.of(a_name())
    with module_database.transaction() as cursor:
        one.write(cursor, 5)
    assert (one.get(), other.get()) == (5, 0)


def test_a_claim_holds_only_where_the_page_starts(
    positions: Positions, module_database: Database
) -> None:
    """If the position is still where the page starts, then the claim holds; if it
    moved, then it does not, and nothing changes."""
    position = positions.of(a_name())
    with module_database.transaction() as cursor:
        assert position.claim(cursor, 0)
        position.write(cursor, 8)
    with module_database.transaction() as cursor:
        assert not position.claim(cursor, 0)
    with module_database.transaction() as cursor:
        assert position.claim(cursor, 8)
    assert position.get() == 8


def test_a_removed_position_reads_zero_and_is_not_the_lowest(
    positions: Positions, module_database: Database
) -> None:
    """If a follower's position is removed, then it reads 0 and the low-water mark
    no longer counts it."""
    with module_database.transaction() as cursor:
        cursor.execute("DELETE FROM jobledger_positions")
    kept, gone = positions.of("b-kept"), positions.of("a-gone")
    with module_database.transaction() as cursor:
        kept.write(cursor, 7)
        gone.write(cursor, 2)
        assert positions.lowest(cursor) == ("a-gone", 2)
    with module_database.transaction() as cursor:
        gone.remove(cursor)
        assert positions.lowest(cursor) == ("b-kept", 7)
    assert gone.get() == 0


def test_the_lowest_position_names_the_follower_furthest_behind(
    positions: Positions, module_database: Database
) -> None:
    """If there are no positions, then there is no lowest; else it is the smallest,
    and among equals the first by name."""
    with module_database.transaction() as cursor:
        cursor.execute("DELETE FROM jobledger_positions")
        assert positions.lowest(cursor) is None
        for name, at in (("c", 3), ("b", 3), ("a", 9)):
            positions.of(name).write(cursor, at)
        assert positions.lowest(cursor) == ("b", 3)


def test_a_lock_makes_the_position_and_keeps_it(
    positions: Positions, module_database: Database
) -> None:
    """If a position is locked, then it exists (at 0, or where it was) and the lock
    moves nothing."""
    name = a_name()
    position = positions.of(name)
    with module_database.transaction() as cursor:
        position.lock(cursor)
        positions.lock_all(cursor)
        cursor.execute("SELECT position FROM jobledger_positions WHERE name = ?", (name,))
        assert cursor.fetchone()[0] == 0
        position.write(cursor, 4)
    with module_database.transaction() as cursor:
        position.lock(cursor)
        positions.lock_all(cursor)
    assert position.get() == 4


@pytest.mark.parametrize("every", [False, True], ids=["one", "all"])
def test_a_claim_waits_for_a_lock_and_sees_what_its_holder_wrote(
    positions: Positions, module_database: Database, every: bool
) -> None:
    """If a transaction holds a position's lock (or every position's), then another
    applier's claim waits for it to end, and then sees where it left the position."""
    position = positions.of(a_name())
    with module_database.transaction() as cursor:
        position.write(cursor, 1)
    locked = threading.Event()

    def hold() -> None:
        with module_database.transaction() as cursor:
            positions.lock_all(cursor) if every else position.lock(cursor)
            locked.set()
            time.sleep(0.3)
            position.write(cursor, 6)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with module_database.transaction() as cursor:
            claimed = position.claim(cursor, 6)
    finally:
        holder.join()
    assert claimed
