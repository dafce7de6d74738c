"""The outbox relay: runs that applications enqueued inside their own PostgreSQL
transaction (``jobledger.client.enqueue_in_transaction``) become executions.

Each relay pass locks up to a batch of committed rows (``FOR UPDATE SKIP LOCKED``, so
several relays never take the same row), enqueues them as ``POST /api/v1/executions``
would (same checks; the row's idempotency key is the run's key, so its id is known to
the application), saves the runs through the group-commit writer, and deletes the rows
in the transaction that locked them. A relay that dies between the save and the delete
leaves the rows to the next one, whose save collides on the same ids: done already. A
row the server refuses keeps its error and is not tried again (ADR "transactional
enqueue").
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import msgspec
import structlog

from jobledger.domain.errors import ConflictError, DomainError, InvalidDefinitionError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.json_values import error_line
from jobledger.domain.roles import Role
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.schemas.executions import RunIn
from jobledger.schemas.outbox import OutboxRow
from jobledger.services.actors import OUTBOX as OUTBOX_VIA
from jobledger.services.actors import Actor
from jobledger.services.bodies import to_ready_at, to_run_spec
from jobledger.services.jobs import HandlerNames

if TYPE_CHECKING:
    from concurrent.futures import Future

log = structlog.get_logger(__name__)

# Who the relay's runs are by: the row carries no user (the application's own
# transaction wrote it), so the relay names itself and how the run came.
RELAY = Actor("outbox", Role.OPERATOR, via=OUTBOX_VIA)
BATCH = 500
MAX_REFUSAL_CHARS = 1000


class OutboxStore(Protocol):
    """The outbox table (PostgreSQL only: an application writes it in its own
    transaction)."""

    def take(self, limit: int, handle: Callable[[list[OutboxRow]], Mapping[int, str]]) -> None:
        """Lock up to ``limit`` committed rows that were not refused, oldest first (rows
        another relay holds are skipped), and hand them to ``handle``; then, in the same
        transaction, delete those it did not refuse and keep each refused row with the
        error ``handle`` returned for it, by row id. Nothing if there are no rows."""
        ...


@dataclass
class RelayReport:
    enqueued: int = 0
    duplicates: int = 0  # runs the log had already (an earlier relay, or the same key twice)
    refused: int = 0

    @property
    def taken(self) -> int:
        """The rows this pass took from the outbox."""
        return self.enqueued + self.duplicates + self.refused


class Outbox:
    """Relays committed outbox rows into the log; see the module doc."""

    def __init__(
        self, store: OutboxStore, ledger: Ledger, writer: GroupCommitWriter, handlers: HandlerNames
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.writer = writer
        self.handlers = handlers

    def relay(self, *, at: datetime, limit: int = BATCH) -> RelayReport:
        """One pass: up to ``limit`` rows, enqueued and deleted (or refused) at once."""
        report = RelayReport()
        self.store.take(limit, lambda rows: self._enqueue(rows, at=at, report=report))
        return report

    def _enqueue(
        self, rows: list[OutboxRow], *, at: datetime, report: RelayReport
    ) -> dict[int, str]:
        """Submit a run per row; the error of each row refused, by row id."""
        refused: dict[int, str] = {}
        submitted: list[tuple[OutboxRow, Execution, Future[None]]] = []
        for row in rows:
            try:
                execution = self._execution(row, at)
            except Exception as error:  # noqa: BLE001 (any row written by other means: one that fails is refused, never the pass)
                refused[row.id] = _refusal(error)
                continue
            submitted.append((row, execution, self.writer.submit(execution)))
        self.writer.flush()
        for row, execution, future in submitted:
            try:
                future.result()
            except ConflictError:
                clash = self._known(execution)
                if clash is not None:
                    refused[row.id] = clash
                    continue
                report.duplicates += 1
                continue
            report.enqueued += 1
        keys = {row.id: row.key for row in rows}
        for row_id, problem in refused.items():
            log.warning("outbox.refused", row=row_id, idempotency_key=keys[row_id], error=problem)
        report.refused = len(refused)
        return refused

    def _execution(self, row: OutboxRow, at: datetime) -> Execution:
        body = msgspec.json.decode(row.run, type=RunIn)
        if body.unique is not None:
            raise InvalidDefinitionError(
                "unique", "the outbox takes no unique runs", "enqueue them over the API"
            )
        spec = to_run_spec(body)
        self.handlers.check(spec.handler, spec.payload, spec.queue)
        spec.check(self.ledger.limits)
        # The API's rules for a run, for a row written by other means than the client.
        ready_at = to_ready_at(body, at)
        return Execution.enqueue(
            spec=spec,
            ready_at=ready_at,
            trigger=Trigger.ADHOC,
            trigger_key=row.key,
            by=RELAY.name,
            via=RELAY.via,
        )

    def _known(self, execution: Execution) -> str | None:
        """A run with this key is in the log already: None if it is this run (a relay
        that died before deleting its rows), else why this row is refused."""
        existing = self.ledger.get_execution(execution.id)
        if existing.spec != execution.spec:
            return "this idempotency key was already used for a different run"
        return None


def _refusal(error: Exception) -> str:
    """Why a row is refused: the checks' own words, else the error's kind and line
    (a run nested past the decoder's depth, say), never a stack trace."""
    if isinstance(error, (msgspec.MsgspecError, DomainError)):
        return str(error)
    return error_line(error, max_chars=MAX_REFUSAL_CHARS)
