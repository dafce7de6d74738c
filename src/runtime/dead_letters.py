"""Dead-letter operations: list, inspect, requeue or discard (one or many, with a dry run).

The queue lists what is dead-lettered (it is a projection of the log); every change is
a command on the Execution aggregate, recorded as an event with who did it and why,
and saved through the group-commit writer in batches.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from jobledger.domain.errors import ConflictError, DomainError
from jobledger.domain.execution import Execution
from jobledger.domain.ledger import Ledger
from jobledger.domain.undecodable import UndecodableEvent
from jobledger.projections.queue import QueueBackend, QueueItem, QueueState, decode_spec
from jobledger.runtime.writer import GroupCommitWriter


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters an operation covers; empty fields match everything."""

    queue: str | None = None
    handler: str | None = None
    job_id: UUID | None = None


@dataclass(frozen=True)
class DeadLetterReport:
    """What an operation on many dead letters did: ``changed`` requeued or discarded."""

    matched: int
    changed: int
    refused: int
    dry_run: bool


def dead_letters(queue: QueueBackend, selection: DeadLetterFilter) -> Iterator[QueueItem]:
    """Dead-lettered entries that match, oldest first."""
    names = [selection.queue] if selection.queue else sorted(queue.queues())
    for name in names:
        dead = (i for i in queue.items(name) if i.state is QueueState.DEAD)
        for item in sorted(dead, key=lambda i: i.at):
            if _matches(item, selection):
                yield item


def _matches(item: QueueItem, selection: DeadLetterFilter) -> bool:
    spec = decode_spec(item.spec)
    return (selection.handler is None or spec.handler == selection.handler) and (
        selection.job_id is None or spec.job_id == selection.job_id
    )


def attempt_history(ledger: Ledger, execution_id: UUID) -> list[dict[str, Any]]:
    """Every event of the execution, oldest first, as plain fields (one that cannot
    be decoded as ``undecodable`` with its topic and error)."""
    return [
        {"event": _name(e), "version": e.originator_version, **_fields(e)}
        for e in ledger.history(execution_id)
    ]


def _name(domain_event: Any) -> str:  # noqa: ANN401 (any execution event)
    if isinstance(domain_event, UndecodableEvent):
        return "undecodable"
    return type(domain_event).__name__


def _fields(domain_event: Any) -> dict[str, Any]:  # noqa: ANN401 (any execution event)
    skip = {"originator_id", "originator_version", "originator_topic", "spec"}
    return {k: v for k, v in vars(domain_event).items() if k not in skip}


def requeue_dead_letters(
    ledger: Ledger,
    writer: GroupCommitWriter,
    ids: list[UUID],
    *,
    by: str,
    reason: str,
    at: datetime,
    error_contains: str | None = None,
    dry_run: bool = False,
) -> DeadLetterReport:
    """Give each dead letter a fresh attempt budget; a dry run only counts."""
    selected = _select(ledger, ids, error_contains)
    if dry_run:
        return DeadLetterReport(len(selected), 0, 0, dry_run=True)
    return _apply(writer, selected, lambda e: e.requeue(by=by, reason=reason, at=at))


def discard_dead_letters(
    ledger: Ledger,
    writer: GroupCommitWriter,
    ids: list[UUID],
    *,
    by: str,
    reason: str,
    error_contains: str | None = None,
    dry_run: bool = False,
) -> DeadLetterReport:
    """Give up on each dead letter for good (the log keeps its history); a dry run only
    counts."""
    selected = _select(ledger, ids, error_contains)
    if dry_run:
        return DeadLetterReport(len(selected), 0, 0, dry_run=True)
    return _apply(writer, selected, lambda e: e.discard(by=by, reason=reason))


def _select(ledger: Ledger, ids: list[UUID], error_contains: str | None) -> list[Execution]:
    executions = [ledger.get_execution(i) for i in ids]
    if error_contains:
        executions = [e for e in executions if error_contains in (e.last_error or "")]
    return executions


def _apply(
    writer: GroupCommitWriter, executions: list[Execution], command: Callable[[Execution], None]
) -> DeadLetterReport:
    futures = []
    refused = 0
    for execution in executions:
        try:
            command(execution)
        except DomainError:
            refused += 1  # no longer dead-lettered: someone else acted on it
            continue
        futures.append(writer.submit(execution))
    changed = 0
    for future in futures:
        try:
            future.result()
            changed += 1
        except ConflictError:
            refused += 1
    return DeadLetterReport(len(executions), changed, refused, dry_run=False)
