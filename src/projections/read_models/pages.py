"""Cursors of every list: a cursor is the sort key of a page's last row, with the
list's kind, so the next page starts after that row and rows added or removed meanwhile
neither repeat nor skip one. The read models page in SQL (their queries' adapter); lists
built in memory (queues, named limits, tokens, users, quarantine, workers, an
aggregate's events) page here, by the same cursors.
"""

import base64
import binascii
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

T = TypeVar("T")
Key = tuple[str | int, ...]


class CursorError(ValueError):
    """A cursor that no page of this list handed out."""


def encode_cursor(kind: str, values: Sequence[str | int]) -> str:
    data = msgspec.json.encode([kind, *values])
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str, width: int) -> list[str | int]:
    """The ``width`` sort values of a cursor of the list ``kind``."""
    try:
        data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found, *values = msgspec.json.decode(data, type=list[str | int])
    except (binascii.Error, msgspec.DecodeError, ValueError):
        raise CursorError("is not a cursor of this list") from None
    if found != kind or len(values) != width:
        raise CursorError("is a cursor of another list") from None
    return values


@dataclass(frozen=True)
class Order(Generic[T]):
    """A list's order as its cursors name it: the list's kind, and each row's sort key
    (unique per row) of ``width`` values."""

    kind: str
    key: Callable[[T], Key]
    width: int = 1


def page_of(
    items: Iterable[T], order: Order[T], *, limit: int, cursor: str | None
) -> tuple[list[T], str | None]:
    """The ``limit`` items after the cursor's in ``order``, and the cursor of the page
    after them (None: this is the last page)."""
    ordered = sorted(items, key=order.key)
    if cursor is not None:
        after = decode_cursor(cursor, order.kind, order.width)
        ordered = [item for item in ordered if _after(order.key(item), after)]
    page = ordered[:limit]
    following = encode_cursor(order.kind, order.key(page[-1])) if len(ordered) > limit else None
    return page, following


def _after(values: Key, cursor: list[str | int]) -> bool:
    if [type(v) for v in values] != [type(v) for v in cursor]:
        raise CursorError("is a cursor of another list")
    return values > tuple(cursor)
