"""Queues: list them with their depths and pauses; pause, resume and drain one.

A pause is a ``QueuePaused`` event on the queue's own aggregate; the queue projection
carries it into the backend, which then leases nothing from that queue (running work
finishes). A drain cancels the queue's pending runs (not the running ones) with the
executions' own cancel command, and records ``QueueDrained`` with them in one save.
"""

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TypeVar
from uuid import UUID

import structlog

from jobledger.domain.errors import ConflictError
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.json_values import check_reason
from jobledger.domain.queue import Queue, check_reason_given, queue_id
from jobledger.domain.roles import Role
from jobledger.persistence.ledger import Ledger
from jobledger.projections.queue.backend import QueueBackend
from jobledger.projections.queue.checkpoint import Checkpoint
from jobledger.schemas.queues import DrainReport, QueueList, QueueOut, QueueStateOut
from jobledger.services.actors import Actor
from jobledger.services.attendance import NEVER, Attendance, Service
from jobledger.services.caps import NO_CAP, QueueRoom
from jobledger.services.errors import ProjectionBehindError
from jobledger.services.pages import Order, paged

log = structlog.get_logger(__name__)

_T = TypeVar("_T")
# Runs cancelled per save of a drain: one QueueDrained lists them, and one transaction
# stays short however long the queue is.
DRAIN_BATCH = 500
# Attempts of a save that lost a race (another pause, a worker's lease in a drain).
ATTEMPTS = 3
# How long a drain waits for the checkpoint to reach the log's head (the projector
# follows within a poll) before it refuses to guess what is pending.
CATCH_UP_SECONDS = 5.0


class Queues:
    """The queue use cases; every change is a direct save, like the jobs'."""

    def __init__(
        self,
        ledger: Ledger,
        backend: QueueBackend,
        checkpoint: Checkpoint,
        attendance: Attendance,
        *,
        catch_up_seconds: float = CATCH_UP_SECONDS,
        room: QueueRoom = NO_CAP,
    ) -> None:
        self.ledger = ledger
        self.backend = backend
        self.checkpoint = checkpoint
        self.catch_up_seconds = catch_up_seconds
        # A pause of a queue nobody used yet creates it: within the cap.
        self.room = room
        # Which queues live workers serve, for the rows and the runs' warnings.
        self.attendance = attendance

    def overview(self, *, at: datetime, by: Actor) -> list[QueueOut]:
        """Every queue the backend knows, by name: depths as projected at ``at``, and
        the pause as the log has it (what the backend enforces a moment later)."""
        by.require(Role.VIEWER)
        services = self.attendance.services(at=at)
        return [self._row(name, at, services) for name in sorted(self.backend.queues())]

    def page(self, *, at: datetime, by: Actor, limit: int, cursor: str | None) -> QueueList:
        """A page of ``overview``: ``limit`` queues after the cursor's, by name."""
        by.require(Role.VIEWER)
        names, following = paged(self.backend.queues(), _BY_NAME, limit=limit, cursor=cursor)
        services = self.attendance.services(at=at)
        rows = [self._row(name, at, services) for name in names]
        return QueueList(queues=rows, next_cursor=following)

    def _row(self, name: str, at: datetime, services: dict[str, Service]) -> QueueOut:
        depths = self.backend.depths(name, now=at)
        queue = self.ledger.queue(name)
        paused = queue if queue is not None and queue.paused else None
        service = services.get(name, NEVER)
        return QueueOut(
            name=name,
            ready=depths.ready,
            delayed=depths.delayed,
            leased=depths.leased,
            dead=depths.dead,
            paused=paused is not None,
            paused_by=paused.paused_by if paused else None,
            paused_since=paused.paused_since if paused else None,
            pause_reason=paused.pause_reason if paused else None,
            workers=service.workers,
            unserved_since=service.unserved_since,
        )

    def warnings(self, queues: Iterable[str], *, at: datetime) -> list[str]:
        """What a caller sending runs to ``queues`` should know: which no worker serves."""
        return self.attendance.warnings(queues, at=at)

    def pause(self, name: str, *, reason: str, at: datetime, by: Actor) -> QueueStateOut:
        """Stop leasing from the queue; pausing a paused queue changes nothing."""
        by.require(Role.OPERATOR)
        changed = self._steer(name, lambda q: q.pause(by=by.name, via=by.via, reason=reason, at=at))
        log.info("queue.paused", queue=name, by=by.name, via=by.via, reason=reason, changed=changed)
        return QueueStateOut(name=name, paused=True, changed=changed)

    def resume(self, name: str, *, at: datetime, by: Actor) -> QueueStateOut:
        """Lease from the queue again; resuming a running queue changes nothing."""
        by.require(Role.OPERATOR)
        changed = self._steer(name, lambda q: q.resume(by=by.name, via=by.via, at=at))
        log.info("queue.resumed", queue=name, by=by.name, via=by.via, changed=changed)
        return QueueStateOut(name=name, paused=False, changed=changed)

    def _steer(self, name: str, command: Callable[[Queue], bool]) -> bool:
        """Run ``command`` on the queue (registered on first use) and save it, again on
        a fresh copy if another change was saved first."""
        queue_id(name)  # refuses a name no queue can have, before anything is loaded
        for attempt in range(1, ATTEMPTS + 1):
            queue = self.ledger.queue(name)
            if queue is None:
                self.room.check(name, field="name")
                queue = Queue.register(name)
            changed = command(queue)
            if not changed:
                return False
            try:
                self.ledger.save_all(queue)
            except ConflictError:
                if attempt == ATTEMPTS:
                    raise
                continue
            return True
        raise AssertionError("unreachable: the last attempt returns or raises")

    def drain(
        self, name: str, *, reason: str, at: datetime, by: Actor, dry_run: bool = False
    ) -> DrainReport:
        """Cancel the queue's pending runs (running ones finish); a dry run lists the
        runs it would cancel, and cancels none."""
        by.require(Role.OPERATOR)
        queue_id(name)
        # Checked before the dry run too, so it answers what the drain itself would.
        check_reason(by.name, reason)
        check_reason_given(reason, "drain")
        self._await_checkpoint()
        pending = self._pending(self.checkpoint.pending_in(name))
        if dry_run:
            return DrainReport(queue=name, dry_run=True, cancelled=[e.id for e in pending])
        cancelled: list[UUID] = []
        # With nothing pending, one empty drain still records who drained and why.
        for batch in _batches(pending, DRAIN_BATCH) if pending else iter([[]]):
            cancelled += self._drain_batch(name, batch, reason=reason, by=by)
        log.info(
            "queue.drained",
            queue=name,
            by=by.name,
            via=by.via,
            reason=reason,
            at=at.isoformat(),
            cancelled=len(cancelled),
        )
        return DrainReport(queue=name, dry_run=False, cancelled=cancelled)

    def _await_checkpoint(self) -> None:
        """Wait until the checkpoint has folded every event logged before the drain was
        asked for, so the drain (and its dry run) covers every run pending by then."""
        head = self.ledger.recorder.max_notification_id() or 0
        deadline = time.monotonic() + self.catch_up_seconds
        while (position := self.checkpoint.position()) < head:
            if time.monotonic() > deadline:
                raise ProjectionBehindError(
                    f"the open-executions checkpoint is {head - position} event(s) behind "
                    "the log, so the runs to drain are not known yet",
                    fix="make sure the projector runs (jobledger projector, or the process "
                    "of jobledger dev), then retry",
                )
            time.sleep(0.05)

    def _pending(self, ids: Sequence[UUID]) -> list[Execution]:
        """The runs of ``ids`` that are pending in the log (the checkpoint may lag)."""
        executions = [self.ledger.get_execution(i) for i in ids]
        return [e for e in executions if e.status is ExecutionStatus.PENDING]

    def _drain_batch(
        self, name: str, batch: list[Execution], *, reason: str, by: Actor
    ) -> list[UUID]:
        """Cancel ``batch`` and record it, in one save. A run a worker leased meanwhile
        conflicts: the batch is loaded again, and what still is pending is cancelled."""
        for attempt in range(1, ATTEMPTS + 1):
            for execution in batch:
                execution.cancel(by=by.name, via=by.via, reason=reason)
            cancelled = tuple(e.id for e in batch)
            queue = self.ledger.queue(name) or Queue.register(name)
            queue.drain(by=by.name, via=by.via, reason=reason, cancelled=cancelled)
            try:
                self.ledger.save_all(queue, *batch)
            except ConflictError:
                if attempt == ATTEMPTS:
                    raise
                batch = self._pending([e.id for e in batch])
                continue
            return list(cancelled)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _batches(values: Sequence[_T], size: int) -> Iterator[list[_T]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


_BY_NAME = Order[str]("queues", lambda name: (name,))
