"""Limit bodies: a named limit as the API takes it, and limits with their use now."""

from datetime import datetime
from typing import Annotated

import msgspec

from jobledger.domain.bounds import MAX_CONCURRENCY, MAX_RATE, MAX_RATE_PERIOD, MIN_RATE_PERIOD
from jobledger.schemas.fields import Short, Strict

# The domain's bounds, declared for the schema.
Concurrency = Annotated[int, msgspec.Meta(ge=1, le=MAX_CONCURRENCY)]
Rate = Annotated[int, msgspec.Meta(ge=1, le=MAX_RATE)]
Period = Annotated[
    float,
    msgspec.Meta(ge=MIN_RATE_PERIOD.total_seconds(), le=MAX_RATE_PERIOD.total_seconds()),
]


class LimitValuesIn(Strict):
    """What a named limit allows: ``concurrency`` runs at once, ``rate`` starts per
    ``per_seconds``, or both."""

    concurrency: Concurrency | None = None
    rate: Rate | None = None
    per_seconds: Period | None = None


class LimitIn(LimitValuesIn, kw_only=True):
    """A new named limit: the key runs name (``limits.concurrency.key`` or
    ``limits.rate.key``) and its values."""

    name: Short


class KeyUse(msgspec.Struct, kw_only=True):
    """One limit key of one queue now: ``in_use`` runs hold it (concurrency) or started
    in the current window (rate); ``waiting`` due runs wait for it; ``allowed`` is the
    value enforced (a named limit's, else the runs' own; None: nothing limits)."""

    queue: str
    kind: str
    key: str
    in_use: int
    waiting: int
    allowed: int | None


class LimitOut(msgspec.Struct, kw_only=True):
    """A named limit, and its use over every queue."""

    name: str
    version: int
    concurrency: int | None
    rate: int | None
    per_seconds: float | None
    changed_at: datetime
    in_use: int = 0
    waiting: int = 0


class LimitList(msgspec.Struct, kw_only=True):
    """The named limits, and every key in use or waited for (named or not)."""

    limits: list[LimitOut]
    keys: list[KeyUse]
    # The cursor of the page of named limits after this one (None: the last page).
    next_cursor: str | None = None


class LimitStateOut(msgspec.Struct, kw_only=True):
    """A named limit after a create or change; ``changed`` is False when the values
    were already those."""

    limit: LimitOut
    changed: bool
