"""Unique runs: at most one open run per key, and what a second request does instead.

A request may name a key, usually from its payload (``"order:{payload.order_id}"``).
While the run that holds the key is in one of the ``states`` and younger than the
``period``, another request with the same key starts nothing; by ``on_conflict`` it
gets the run that holds the key (``return_existing``), swaps that run's payload
(``replace``), or also moves its start to its own due time (``debounce``). The key is
an aggregate of its own, so two racing requests save the same version of it and one
of them loses: exactly one run, whatever the concurrency.
"""

import enum
import uuid
from datetime import datetime, timedelta
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.json_values import MAX_KEY_CHARS, check_text
from jobledger.domain.key_templates import resolve_key

UNIQUE_NAMESPACE = uuid.UUID("0f7c2d4e-8a1b-4c3d-9e5f-6a7b8c9d0e1f")
MAX_PERIOD = timedelta(days=30)
# The states a run may hold its key in: the open ones, and the ends that may count.
HOLDING_STATES = frozenset({"pending", "running", "completed", "dead_lettered"})


class OnConflict(enum.StrEnum):
    RETURN_EXISTING = "return_existing"
    REPLACE = "replace"
    DEBOUNCE = "debounce"


class UniqueSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs count as the same, for how long, and what a duplicate does."""

    key: str
    period: timedelta = timedelta(minutes=5)
    states: tuple[str, ...] = ("pending", "running")
    on_conflict: OnConflict = OnConflict.RETURN_EXISTING

    def check(self) -> None:
        check_text(self.key, "unique.key", max_chars=MAX_KEY_CHARS)
        if not self.key:
            raise InvalidDefinitionError("unique.key", "is empty", 'name the key, e.g. "order:42"')
        if not timedelta(seconds=1) <= self.period <= MAX_PERIOD:
            raise InvalidDefinitionError(
                "unique.period_seconds",
                f"is {self.period.total_seconds():g} s",
                f"give 1 to {MAX_PERIOD.total_seconds():g} seconds",
            )
        unknown = sorted(set(self.states) - HOLDING_STATES) or ([] if self.states else ["none"])
        if unknown:
            raise InvalidDefinitionError(
                "unique.states",
                f"has {', '.join(unknown)}",
                f"list one or more of {', '.join(sorted(HOLDING_STATES))}",
            )

    def resolve(self, payload: dict[str, Any]) -> str:
        """The key with each ``{payload.a.b}`` replaced by that value of the payload."""
        return resolve_key(self.key, payload, field="unique.key")


def unique_key_id(key: str) -> uuid.UUID:
    return uuid.uuid5(UNIQUE_NAMESPACE, key)


class UniqueKey(Aggregate):
    """A resolved unique key and the run that holds it."""

    class Claimed(Aggregate.Created):
        TOPIC = "jobledger:UniqueKeyClaimed"
        key: str
        execution_id: uuid.UUID
        at: datetime

    class Passed(Aggregate.Event):
        TOPIC = "jobledger:UniqueKeyPassed"
        execution_id: uuid.UUID
        at: datetime

    @event(Claimed)
    def __init__(self, *, key: str, execution_id: uuid.UUID, at: datetime) -> None:
        self.key = key
        self.execution_id = execution_id
        self.claimed_at = at

    @staticmethod
    def create_id(key: str) -> uuid.UUID:
        return unique_key_id(key)

    def holds(self, spec: UniqueSpec, *, status: str, at: datetime) -> bool:
        """Whether the holding run, now in ``status``, still keeps the key at ``at``."""
        return status in spec.states and at - self.claimed_at < spec.period

    def pass_to(self, execution_id: uuid.UUID, *, at: datetime) -> None:
        """A new run holds the key from ``at`` (the last one no longer does)."""
        self._passed(execution_id=execution_id, at=at)

    @event(Passed)
    def _passed(self, *, execution_id: uuid.UUID, at: datetime) -> None:
        self.execution_id = execution_id
        self.claimed_at = at
