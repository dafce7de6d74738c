"""Executions: run a handler ad hoc, cancel it, read it and its history (its attempts
as the read models show them: ``Views.execution_detail``)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import ConflictError, InvalidDefinitionError, NotFoundError
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.domain.roles import Role
from jobledger.domain.unique import UniqueSpec
from jobledger.persistence.batch_events import enqueued_batch
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.streams import load_many
from jobledger.schemas.executions import MAX_BATCH_RUNS, ExecutionRef
from jobledger.services.actors import Actor
from jobledger.services.errors import KeyReusedError
from jobledger.services.history import ArchivedHistory, EventOut, history, no_archive
from jobledger.services.jobs import ANY_HANDLER, HandlerNames
from jobledger.services.unique_runs import NewRun, RunOutcome, run_once

# Tries of a cancel against a worker's saves to the same run (a lease, a report).
_CANCEL_TRIES = 5
# A batch saved again after another writer saved some of its runs first.
_BATCH_SAVE_TRIES = 3


@dataclass(frozen=True)
class BatchRun:
    """One run of a batch: what to run, its idempotency key and when it is due."""

    spec: ExecutionSpec
    key: str
    ready_at: datetime


@dataclass(frozen=True)
class BatchOutcome:
    """The runs of a batch in its order; ``created`` of them are new, the others were
    enqueued before under the same keys (a batch sent again)."""

    executions: list[ExecutionRef]
    created: int


class Executions:
    """The execution use cases; changes are direct saves, like the jobs'."""

    def __init__(
        self,
        ledger: Ledger,
        handlers: HandlerNames = ANY_HANDLER,
        archived: ArchivedHistory = no_archive,
    ) -> None:
        self.ledger = ledger
        self.handlers = handlers
        # An execution whose history left the log (retention) is read from its archive.
        self.archived = archived

    def run(
        self,
        spec: ExecutionSpec,
        *,
        key: str,
        at: datetime,
        by: Actor,
        ready_at: datetime | None = None,
    ) -> Execution:
        """Enqueue a handler run that belongs to no job, due at ``ready_at`` (default
        ``at``: now). The same key returns the first run; the same key for a different
        run is refused."""
        by.require(Role.OPERATOR)
        self._check_spec(spec)
        execution = Execution.enqueue(
            spec=spec,
            ready_at=ready_at or at,
            trigger=Trigger.ADHOC,
            trigger_key=key,
            by=by.name,
            via=by.via,
        )
        try:
            # The store's own save (one COPY): a run is one event, which the
            # library's save would send in half a dozen round trips.
            self.ledger.append(execution.collect_events())
        except ConflictError:
            execution = self.ledger.get_execution(execution.id)
        if execution.spec != spec.resolved():
            raise KeyReusedError(
                "this Idempotency-Key was already used for a different execution",
                field="Idempotency-Key",
                fix="use a new key for a new request",
            )
        return execution

    def run_unique(
        self,
        spec: ExecutionSpec,
        unique: UniqueSpec,
        *,
        key: str,
        at: datetime,
        by: Actor,
        ready_at: datetime | None = None,
    ) -> RunOutcome:
        """Enqueue a run unless another run holds the unique key (see
        ``domain/unique.py`` and ``unique_runs.py``)."""
        by.require(Role.OPERATOR)
        self._check_spec(spec)
        due = ready_at or at

        def enqueue() -> NewRun:
            run = Execution.enqueue(
                spec=spec,
                ready_at=due,
                trigger=Trigger.ADHOC,
                trigger_key=key,
                by=by.name,
                via=by.via,
            )
            return NewRun(run, ())

        return run_once(self.ledger, unique, spec, enqueue, at=at, due=due, by=by)

    def run_many(self, runs: Sequence[BatchRun], *, by: Actor) -> BatchOutcome:
        """Enqueue many ad-hoc runs in one transaction: all of them, or, if one is
        refused, none (the error names it as ``runs[i]``). A run whose key was used
        before is returned as it was, and a key used for a different run is refused."""
        by.require(Role.OPERATOR)
        self._check_batch(runs)
        # The events alone: a batch saves them and answers ids, it needs no run objects.
        wanted = enqueued_batch(runs, trigger=Trigger.ADHOC, by=by.name, via=by.via)
        existing: dict[UUID, Execution] = {}
        for attempt in range(_BATCH_SAVE_TRIES):
            new = [e for e in wanted if e.originator_id not in existing]
            try:
                if new:
                    self.ledger.append(new)
                break
            except ConflictError:
                if attempt == _BATCH_SAVE_TRIES - 1:
                    raise
                # Some were enqueued first (this batch sent again): keep those as they
                # are, if their keys still name the same runs; then save the others.
                ids = [e.originator_id for e in wanted]
                existing = load_many(self.ledger, Execution, ids)
                _check_keys_kept(runs, ids, existing)
        refs = [_ref(e.originator_id, existing) for e in wanted]
        return BatchOutcome(refs, created=len(wanted) - len(existing))

    def _check_spec(self, spec: ExecutionSpec) -> None:
        """A handler the workers have, with a payload it and the stores take."""
        self.handlers.check(spec.handler, spec.payload, spec.queue)
        spec.check(self.ledger.limits)

    def _check_batch(self, runs: Sequence[BatchRun]) -> None:
        if len(runs) > MAX_BATCH_RUNS:
            raise InvalidDefinitionError(
                "runs", f"{len(runs)} runs in one batch", f"send at most {MAX_BATCH_RUNS} a request"
            )
        seen: dict[str, int] = {}
        for index, run in enumerate(runs):
            if run.key in seen:
                raise InvalidDefinitionError(
                    f"runs[{index}].key",
                    f"the same key as runs[{seen[run.key]}]",
                    "give every run of a batch a key of its own",
                )
            seen[run.key] = index
            try:
                self._check_spec(run.spec)
            except InvalidDefinitionError as error:
                raise InvalidDefinitionError(
                    f"runs[{index}].{error.field}", error.problem, error.fix
                ) from error

    def cancel(self, execution_id: UUID, *, by: Actor, reason: str = "") -> Execution:
        """Cancel a pending or running execution; a running handler is told to stop. A
        worker's lease or report saved meanwhile is read again and cancelled after it."""
        by.require(Role.OPERATOR)
        for attempt in range(_CANCEL_TRIES):
            execution = self.ledger.get_execution(execution_id)
            execution.cancel(by=by.name, via=by.via, reason=reason)
            try:
                self.ledger.save_all(execution)
            except ConflictError:
                if attempt == _CANCEL_TRIES - 1:
                    raise
                continue
            return execution
        raise AssertionError("unreachable: the last try returns or raises")

    def get(self, execution_id: UUID) -> Execution:
        """The execution as the log has it now."""
        return self.ledger.get_execution(execution_id)

    def history(self, execution_id: UUID) -> list[EventOut]:
        """Every event of the execution, from the log or, once archived, its archive."""
        try:
            return history(self.ledger, Execution, execution_id)
        except NotFoundError:
            events = self.archived(execution_id)
            if events is None:
                raise
            return events


def _ref(execution_id: UUID, existing: dict[UUID, Execution]) -> ExecutionRef:
    found = existing.get(execution_id)
    status = ExecutionStatus.PENDING if found is None else found.status
    return ExecutionRef(execution_id, str(status))


def _check_keys_kept(
    runs: Sequence[BatchRun], ids: Sequence[UUID], existing: dict[UUID, Execution]
) -> None:
    """A key sent again must name the same run, as with one run at a time."""
    for index, (run, execution_id) in enumerate(zip(runs, ids, strict=True)):
        found = existing.get(execution_id)
        if found is not None and found.spec != run.spec.resolved():
            raise KeyReusedError(
                f"runs[{index}]: this key was already used for a different execution",
                field=f"runs[{index}].key",
                fix="use a new key (or a new Idempotency-Key for the batch) for new runs",
            )
