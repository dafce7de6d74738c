"""Unique runs: the decision of ``domain/unique.py`` against the log, for any way a
run starts (an ad-hoc run, a job's trigger).

Each try reads the key and, if some run holds it, that run's status from the log. A
held key makes the request a duplicate (and may replace or debounce the pending
holder); a free key passes to a new run, saved in one transaction with the key's next
event and whatever else the run changes (the job it triggers). A racing request saves
the same version of the key, loses, and decides again against the winner.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from eventsourcing.domain import Aggregate

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import ConflictError, NotFoundError
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.unique import OnConflict, UniqueKey, UniqueSpec
from jobledger.persistence.ledger import Ledger
from jobledger.services.actors import Actor
from jobledger.services.errors import KeyReusedError

# Tries of a unique run against racing requests for the same key.
_TRIES = 8


@dataclass(frozen=True)
class Started:
    """The request started a run (or, sent again with its key, finds the one it started)."""

    execution: Execution


@dataclass(frozen=True)
class Duplicate:
    """Another run holds the request's unique key; ``action`` says what the request did
    to it (``return_existing``: nothing)."""

    execution: Execution
    action: OnConflict


RunOutcome = Started | Duplicate


@dataclass(frozen=True)
class NewRun:
    """A run about to start, and the other aggregates its start changes."""

    execution: Execution
    with_it: Sequence[Aggregate]


def run_once(
    ledger: Ledger,
    unique: UniqueSpec,
    spec: ExecutionSpec,
    start: Callable[[], NewRun],
    *,
    at: datetime,
    due: datetime,
    by: Actor,
) -> RunOutcome:
    """``start`` a run unless another run holds ``unique``'s key for ``spec``'s payload."""
    unique.check()
    resolved = unique.resolve(spec.payload)
    for _ in range(_TRIES):
        claim = _unique_key(ledger, resolved)
        holder = None if claim is None else _holder(ledger, claim, unique, at)
        try:
            if holder is not None:
                return _duplicate(ledger, holder, spec, unique, due=due, by=by)
            return Started(_claim(ledger, claim, resolved, start(), at=at))
        except ConflictError:
            continue  # another request changed the key or the run first: look again
    raise ConflictError(f"the unique key {resolved!r} kept changing; retry the request")


def _unique_key(ledger: Ledger, resolved: str) -> UniqueKey | None:
    try:
        return ledger.get_unique_key(resolved)
    except NotFoundError:
        return None


def _holder(ledger: Ledger, claim: UniqueKey, unique: UniqueSpec, at: datetime) -> Execution | None:
    try:
        holder = ledger.get_execution(claim.execution_id)
    except NotFoundError:
        return None
    return holder if claim.holds(unique, status=holder.status.value, at=at) else None


def _claim(
    ledger: Ledger, claim: UniqueKey | None, resolved: str, new: NewRun, *, at: datetime
) -> Execution:
    execution = new.execution
    if claim is None:
        claim = UniqueKey(key=resolved, execution_id=execution.id, at=at)
    else:
        claim.pass_to(execution.id, at=at)
    try:
        ledger.save_all(claim, *new.with_it, execution)
    except ConflictError:
        try:  # the same request sent again: its run exists under its key
            return ledger.get_execution(execution.id)
        except NotFoundError:
            raise ConflictError("the unique key was claimed first") from None
    return execution


def _duplicate(
    ledger: Ledger,
    holder: Execution,
    spec: ExecutionSpec,
    unique: UniqueSpec,
    *,
    due: datetime,
    by: Actor,
) -> Duplicate:
    action = unique.on_conflict
    if action is OnConflict.RETURN_EXISTING or holder.status is not ExecutionStatus.PENDING:
        return Duplicate(holder, OnConflict.RETURN_EXISTING)
    if holder.spec.handler != spec.handler:
        raise KeyReusedError(
            f"the unique key is held by a run of {holder.spec.handler}, not {spec.handler}",
            field="unique.key",
            fix="give runs of different handlers keys of their own",
        )
    moved = due if action is OnConflict.DEBOUNCE else None
    holder.replace_payload(payload=spec.payload, by=by.name, via=by.via, ready_at=moved)
    ledger.save_all(holder)
    return Duplicate(holder, action)
