"""Concurrency and rate limits per key, and named limits an operator manages.

A run may carry ``limits``: at most ``max`` runs with the same concurrency key run at
once, and at most ``limit`` runs with the same rate key start in any ``per`` window.
Keys are usually built from the payload (``"customer:{payload.customer_id}"``), so
one definition limits each customer on its own; a run resolves them when it is
enqueued, and its spec keeps the resolved keys.

A named limit (the ``Limit`` aggregate) gives a key its values from the log: when a
limit with a run's key exists, its values apply instead of the run's own, also to runs
already waiting. A run that names a key without values waits on nothing until a named
limit of that key exists. A deleted limit no longer applies (runs go back to their own
values); defining its name again gives the same aggregate new values.

Limits are enforced where runs are leased, per queue (see ADR 0040): a run over its
limit stays pending, spends no attempt, and the log records once that it waited
(``ExecutionThrottled``).
"""

import enum
import uuid
from datetime import datetime, timedelta
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event

from jobledger.domain.bounds import MAX_CONCURRENCY, MAX_RATE, MAX_RATE_PERIOD, MIN_RATE_PERIOD
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.json_values import check_actor, check_text
from jobledger.domain.key_templates import is_template, resolve_key
from jobledger.domain.names import check_name

MAX_LIMIT_KEY_CHARS = 200
LIMIT_NAMESPACE = uuid.UUID("5d0c8e2a-3b7f-4f61-9a2e-1c4d6b8e0f37")
# Keys end up in Redis key names and in the queue's descriptor strings, which separate
# fields with the unit separator: no control character may appear.
_FORBIDDEN = frozenset(chr(c) for c in range(32)) | {"\x7f"}


class LimitKind(enum.StrEnum):
    CONCURRENCY = "concurrency"
    RATE = "rate"


def check_limit_key(key: str, field: str) -> None:
    check_text(key, field, max_chars=MAX_LIMIT_KEY_CHARS)
    if not key.strip():
        raise InvalidDefinitionError(field, "is empty", 'name the key, e.g. "customer:42"')
    if _FORBIDDEN & set(key):
        raise InvalidDefinitionError(
            field, "holds a control character", "use printable characters only"
        )


def _check_count(value: int | None, field: str, most: int) -> None:
    if value is not None and not 1 <= value <= most:
        raise InvalidDefinitionError(field, f"is {value}", f"give 1 to {most}")


def _check_period(per: timedelta | None, field: str) -> None:
    if per is not None and not MIN_RATE_PERIOD <= per <= MAX_RATE_PERIOD:
        raise InvalidDefinitionError(
            field,
            f"is {per.total_seconds():g} s",
            f"give {MIN_RATE_PERIOD.total_seconds():g} to"
            f" {MAX_RATE_PERIOD.total_seconds():g} seconds",
        )


class ConcurrencyLimit(msgspec.Struct, frozen=True, kw_only=True):
    """At most ``max`` runs with ``key`` at once (None: the named limit's)."""

    key: str
    max: int | None = None

    def check(self) -> None:
        check_limit_key(self.key, "limits.concurrency.key")
        _check_count(self.max, "limits.concurrency.max", MAX_CONCURRENCY)


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    """At most ``limit`` starts of runs with ``key`` in any ``per`` (None: the named
    limit's)."""

    key: str
    limit: int | None = None
    per: timedelta | None = None

    def check(self) -> None:
        check_limit_key(self.key, "limits.rate.key")
        _check_count(self.limit, "limits.rate.limit", MAX_RATE)
        _check_period(self.per, "limits.rate.per_seconds")
        if (self.limit is None) != (self.per is None):
            raise InvalidDefinitionError(
                "limits.rate",
                "gives only one of limit and per_seconds",
                "give both, or neither to take a named limit's",
            )


class RunLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The limits a run waits for."""

    concurrency: ConcurrencyLimit | None = None
    rate: RateLimit | None = None

    def check(self) -> None:
        if self.concurrency is None and self.rate is None:
            raise InvalidDefinitionError(
                "limits", "names no limit", "give concurrency, rate or both, or leave it out"
            )
        if self.concurrency is not None:
            self.concurrency.check()
        if self.rate is not None:
            self.rate.check()

    def check_payload(self, payload: dict[str, Any]) -> None:
        """Raise if a key names a payload field that ``payload`` cannot give."""
        self.resolve(payload)

    def resolve(self, payload: dict[str, Any]) -> "RunLimits":
        """The limits with every key built from ``payload`` (and checked again)."""
        concurrency, rate = self.concurrency, self.rate
        if concurrency is not None and is_template(concurrency.key):
            key = resolve_key(concurrency.key, payload, field="limits.concurrency.key")
            concurrency = msgspec.structs.replace(concurrency, key=key)
        if rate is not None and is_template(rate.key):
            key = resolve_key(rate.key, payload, field="limits.rate.key")
            rate = msgspec.structs.replace(rate, key=key)
        resolved = RunLimits(concurrency=concurrency, rate=rate)
        if resolved != self:
            resolved.check()
        return resolved


class LimitValues(msgspec.Struct, frozen=True, kw_only=True):
    """What a named limit allows: runs at once, starts per period, or both."""

    concurrency: int | None = None
    rate: int | None = None
    per: timedelta | None = None

    def check(self) -> None:
        if self.concurrency is None and self.rate is None:
            raise InvalidDefinitionError(
                "limit", "allows everything", "give concurrency, or rate and per_seconds"
            )
        _check_count(self.concurrency, "concurrency", MAX_CONCURRENCY)
        _check_count(self.rate, "rate", MAX_RATE)
        _check_period(self.per, "per_seconds")
        if (self.rate is None) != (self.per is None):
            raise InvalidDefinitionError(
                "rate", "comes without per_seconds, or the other way", "give both or neither"
            )


def limit_id(name: str) -> uuid.UUID:
    """The id of the named limit ``name`` (checked)."""
    check_limit_key(name, "name")
    if is_template(name):
        raise InvalidDefinitionError(
            "name",
            "names payload fields",
            "a named limit has one key: name it as runs resolve it, e.g. stripe",
        )
    if "/" in name:
        raise InvalidDefinitionError(
            "name",
            "holds a /, which its URL (/api/v1/limits/{name}) cannot carry",
            "use : or . to separate its parts, e.g. api:stripe",
        )
    # People pick a named limit by its name, as they pick a job: the same rule.
    check_name(name)
    return uuid.uuid5(LIMIT_NAMESPACE, name)


class Limit(Aggregate):
    """A named limit: the values of one key, for every run that names it."""

    TOPIC = "jobledger:Limit"

    class Created(Aggregate.Created):
        # Never emitted (limits begin with Defined); eventsourcing wants every event
        # class of an aggregate with a stable topic to have one.
        TOPIC = "jobledger:LimitCreated"

    class Defined(Aggregate.Created):
        TOPIC = "jobledger:LimitDefined"
        name: str
        values: LimitValues
        by: str
        at: datetime
        via: str | None = None  # how ``by`` came; None before it existed

    class Changed(Aggregate.Event):
        TOPIC = "jobledger:LimitChanged"
        name: str
        values: LimitValues
        by: str
        at: datetime
        via: str | None = None

    class Deleted(Aggregate.Event):
        TOPIC = "jobledger:LimitDeleted"
        name: str
        by: str
        at: datetime
        via: str | None = None

    @event(Defined)
    def __init__(
        self, *, name: str, values: LimitValues, by: str, at: datetime, via: str | None = None
    ) -> None:
        del by, via
        self.name = name
        self.values = values
        self.changed_at = at
        self.deleted = False

    @classmethod
    def define(
        cls, name: str, values: LimitValues, *, by: str, at: datetime, via: str | None = None
    ) -> "Limit":
        values.check()
        check_actor(by)
        return cls._create(
            cls.Defined, id=limit_id(name), name=name, values=values, by=by, at=at, via=via
        )

    def change(self, values: LimitValues, *, by: str, at: datetime, via: str | None = None) -> bool:
        """Give the key new values; False (and nothing recorded) if they are the same.
        A deleted limit applies again with them."""
        values.check()
        check_actor(by)
        if values == self.values and not self.deleted:
            return False
        self._changed(name=self.name, values=values, by=by, at=at, via=via)
        return True

    @event(Changed)
    def _changed(
        self, *, name: str, values: LimitValues, by: str, at: datetime, via: str | None = None
    ) -> None:
        del name, by, via
        self.values = values
        self.changed_at = at
        self.deleted = False

    def delete(self, *, by: str, at: datetime, via: str | None = None) -> bool:
        """Stop applying the limit; False (and nothing recorded) if it is deleted."""
        check_actor(by)
        if self.deleted:
            return False
        self._deleted(name=self.name, by=by, at=at, via=via)
        return True

    @event(Deleted)
    def _deleted(self, *, name: str, by: str, at: datetime, via: str | None = None) -> None:
        del name, by, via
        self.changed_at = at
        self.deleted = True
