"""Pages of the lists the use cases build in memory (queues, named limits, tokens,
users, quarantine, workers, an aggregate's events), by the cursors the read models'
lists use (``projections/read_models/pages.py``)."""

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

from jobledger.projections.read_models.pages import CursorError, Order, page_of
from jobledger.services.errors import InvalidCursorError

__all__ = ["Order", "cursor_checked", "paged"]

T = TypeVar("T")


@contextlib.contextmanager
def cursor_checked() -> Iterator[None]:
    """A cursor no page of the list handed out, as the use cases refuse it (400)."""
    try:
        yield
    except CursorError as error:
        raise InvalidCursorError(
            f"cursor: {error}",
            field="cursor",
            fix="pass the next_cursor of the previous page of the same list, or no cursor",
        ) from None


def paged(
    items: Iterable[T], order: Order[T], *, limit: int, cursor: str | None
) -> tuple[list[T], str | None]:
    """The page of ``items`` after ``cursor`` (see ``page_of``)."""
    with cursor_checked():
        return page_of(items, order, limit=limit, cursor=cursor)
