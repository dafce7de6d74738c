"""Loading many aggregates at once: one query for their streams instead of one each.

A worker that leases 32 executions would otherwise make 32 round trips (and 32 cache
copies) before it can record the leases. A store that can (PostgreSQL) gives the
streams back in one statement (``LogStore.streams``); with others they load one by one
through the repository.
"""

from collections.abc import Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from jobledger.persistence.codec import row_decoder
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import Held

A = TypeVar("A", bound=Aggregate)


def load_many(
    ledger: Ledger, kind: type[A], ids: Sequence[UUID], held: Held | None = None
) -> dict[UUID, A]:
    """The current state of each id that exists and is a ``kind``; others are left out.
    On PostgreSQL, on ``held``'s connection if given (a worker's lease rounds), else on
    one of the pool's."""
    if not ids:
        return {}
    rows = ledger.log_store.streams(list(ids), held)
    if rows is None:
        return _one_by_one(ledger, kind, ids)
    # Straight from the columns, without a StoredEvent (a worker loads every run it leases).
    decode = row_decoder(ledger.mapper)
    found: dict[UUID, A] = {}
    aggregate: Any = None
    current: UUID | None = None
    # The ids come as UUIDs (the column's type), the rows ordered by id and version.
    for originator_id, version, topic, state in rows:
        if originator_id != current:
            _keep(found, kind, current, aggregate)
            current, aggregate = originator_id, None
        domain_event: Any = decode(originator_id, version, topic, state)
        aggregate = domain_event.mutate(aggregate)
    _keep(found, kind, current, aggregate)
    return found


def _keep(found: dict[UUID, A], kind: type[A], key: UUID | None, aggregate: object) -> None:
    if key is not None and isinstance(aggregate, kind):
        found[key] = aggregate


def _one_by_one(ledger: Ledger, kind: type[A], ids: Sequence[UUID]) -> dict[UUID, A]:
    found: dict[UUID, A] = {}
    for aggregate_id in ids:
        try:
            aggregate: Aggregate = ledger.repository.get(aggregate_id)
        except AggregateNotFoundError:
            continue
        if isinstance(aggregate, kind):
            found[aggregate_id] = aggregate
    return found
