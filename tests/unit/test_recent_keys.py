"""The tokens an API process keeps for a second (ADR 103)."""

import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.roles import Role
from jobledger.infra.accounts import ApiToken, StoredKey, User
from jobledger.services.recent_keys import RecentKeys

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def stored(name: str = "ci") -> StoredKey:
    user = User(uuid.uuid4(), "alice", Role.OPERATOR, disabled=False, created_at=T0)
    token = ApiToken(uuid.uuid4(), name, Role.VIEWER, user.id, T0, None, None, None)
    return StoredKey(user, token)


@given(st.integers(min_value=-5_000, max_value=5_000))
def test_a_row_answers_for_a_second_after_its_read(offset: int) -> None:
    """If a row was read at t, then it answers at t + d for 0 <= d < 1 s and not
    otherwise (a clock that stepped back reads again)."""
    keys, key = RecentKeys(), stored()
    keys.put("d", key, read_ms=10_000, generation=keys.generation)
    found = keys.get("d", at_ms=10_000 + offset)
    assert (found is key) == (0 <= offset < 1_000)


def test_a_read_older_than_a_change_is_not_kept() -> None:
    """If the rows are forgotten while a read is under way, then that read is not kept,
    and the next read is."""
    keys, key = RecentKeys(), stored()
    began = keys.generation
    keys.forget()
    keys.put("d", key, read_ms=0, generation=began)
    assert keys.get("d", at_ms=1) is None
    keys.put("d", key, read_ms=0, generation=keys.generation)
    assert keys.get("d", at_ms=1) is key


def test_forgetting_drops_every_row_and_a_replacement_keeps_the_read_time() -> None:
    """If a row is replaced (its last use touched), then it keeps its read time; if the
    rows are forgotten, then none answers."""
    keys, key, touched = RecentKeys(), stored(), stored("touched")
    keys.put("a", key, read_ms=0, generation=keys.generation)
    keys.put("b", key, read_ms=0, generation=keys.generation)
    keys.replace("a", touched)
    keys.replace("c", touched)  # not kept: nothing to replace
    assert keys.get("a", at_ms=999) is touched
    assert keys.get("a", at_ms=1_000) is None
    assert keys.get("c", at_ms=0) is None
    keys.forget()
    assert keys.get("b", at_ms=1) is None


def test_past_the_bound_the_rows_start_again() -> None:
    """If more tokens than the bound were read, then the process holds at most the
    bound."""
    keys = RecentKeys(most=3)
    for n in range(7):
        keys.put(str(n), stored(), read_ms=0, generation=keys.generation)
    assert sum(keys.get(str(n), at_ms=0) is not None for n in range(7)) <= 3
    assert keys.get("6", at_ms=0) is not None
