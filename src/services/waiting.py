"""Why each pending run waits, in words, for every list and page of runs.

A run's row keeps what its last event said (``waiting``: a back-off after a failed
attempt, a deferral by an open breaker, a snooze, a limit it waited for). Only the
moment knows the rest: whether its queue is paused, and whether a live worker serves its
queue. A run not yet due says until when and why; a due one says what holds it, or that
it is ready for the next free slot.
"""

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

import msgspec

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.execution import ExecutionStatus
from jobledger.domain.queue import Queue
from jobledger.infra.presence import WorkerInfo
from jobledger.schemas.rows import ExecutionRow

_PENDING = ExecutionStatus.PENDING.value
READY = "ready: waits for a free worker slot"


class LiveWorkers(Protocol):
    """What the reasons need of the workers' presence: who is alive, on which queues."""

    def live(self, *, now: datetime, stale_after: timedelta) -> list[WorkerInfo]: ...


class WaitingReasons:
    """Reasons for the pending runs among rows; the others get none."""

    def __init__(
        self,
        queue_of: Callable[[str], Queue | None],
        presence: LiveWorkers | None,
        *,
        stale_after: timedelta,
        now: Clock = utc_now,
    ) -> None:
        self._queue_of = queue_of
        self._presence = presence
        self._stale_after = stale_after
        self._now = now

    def explain(self, rows: Sequence[ExecutionRow]) -> list[ExecutionRow]:
        """``rows`` with ``waiting`` said: one look at the queues and the live workers for
        all of them."""
        pending = {row.queue for row in rows if row.status == _PENDING}
        if not pending:
            return [_said(row, None) for row in rows]
        now = self._now()
        held = {name: self._held(name) for name in pending}
        served = self._served(now)
        return [
            _said(row, _reason(row, now, held.get(row.queue), served))
            if row.status == _PENDING
            else _said(row, None)
            for row in rows
        ]

    def _held(self, name: str) -> str | None:
        queue = self._queue_of(name)
        if queue is None or not queue.paused:
            return None
        return f"queue {name} paused by {queue.paused_by or 'someone'}"

    def _served(self, now: datetime) -> set[str] | None:
        """The queues a live worker serves; None when nobody reports (no presence)."""
        if self._presence is None:
            return None
        live = self._presence.live(now=now, stale_after=self._stale_after)
        return {name for worker in live for name in worker.queues}


def _reason(row: ExecutionRow, now: datetime, paused: str | None, served: set[str] | None) -> str:
    if row.ready_at is not None and row.ready_at > now:
        why = row.waiting or ("due" if row.attempt <= 1 else "due again")
        return f"{why}, until {row.ready_at.isoformat()}"
    if paused is not None:
        return paused
    if served is not None and row.queue not in served:
        return f"no live worker serves queue {row.queue}"
    if row.waiting is not None and row.waiting.startswith("waits for"):
        return row.waiting  # a limit still full, as far as the log knows
    return READY


def _said(row: ExecutionRow, reason: str | None) -> ExecutionRow:
    if row.waiting == reason:
        return row
    return msgspec.structs.replace(row, waiting=reason)
