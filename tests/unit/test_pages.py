"""Pages of the lists built in memory, by the cursors every list uses."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.projections.read_models.pages import CursorError, Order, encode_cursor, page_of

NAMES = Order[str]("names", lambda name: (name,))
NUMBERED = Order[tuple[int, str]]("numbered", lambda row: row, width=2)


def walk(rows: set[str], limit: int) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = page_of(rows, NAMES, limit=limit, cursor=cursor)
        assert len(page) <= limit
        seen += page
        if cursor is None:
            return seen


@given(st.sets(st.text(max_size=5)), st.integers(1, 7))
def test_paging_to_the_end_shows_every_row_once_in_order(rows: set[str], limit: int) -> None:
    """If a list is read page by page along its cursor, then every row comes once, in
    the list's order."""
    assert walk(rows, limit) == sorted(rows)


@given(st.sets(st.integers(0, 50), min_size=2), st.sets(st.integers(0, 50)), st.integers(1, 5))
def test_rows_added_or_removed_between_pages_never_repeat_one(
    rows: set[int], changed: set[int], limit: int
) -> None:
    """If rows are added and removed between two pages, then no row shows twice and
    every row that stayed through both pages shows once."""
    items = {(n, "x") for n in rows}
    first, cursor = page_of(items, NUMBERED, limit=limit, cursor=None)
    later = items ^ {(n, "x") for n in changed}
    rest: list[tuple[int, str]] = []
    while cursor is not None:
        page, cursor = page_of(later, NUMBERED, limit=limit, cursor=cursor)
        rest += page
    shown = first + rest
    assert len(shown) == len(set(shown))
    assert items & later <= set(shown)


@pytest.mark.parametrize(
    "cursor",
    ["!!", "bm90IGpzb24", encode_cursor("other", ["a"]), encode_cursor("names", ["a", "b"])],
)
def test_a_cursor_of_no_page_of_the_list_is_refused(cursor: str) -> None:
    """If a cursor is not one, or one of another list, then CursorError says so."""
    with pytest.raises(CursorError):
        page_of({"a", "b"}, NAMES, limit=1, cursor=cursor)


def test_a_cursor_with_values_of_other_types_is_refused() -> None:
    """If a cursor of the same kind holds a number where the list sorts by text, then
    CursorError says so (no TypeError)."""
    with pytest.raises(CursorError):
        page_of({"a"}, NAMES, limit=1, cursor=encode_cursor("names", [3]))
