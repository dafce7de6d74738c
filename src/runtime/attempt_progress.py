"""The progress of one running attempt: shown live, recorded in the log when due; and
the lines its handler logged, recorded as they come (``record_lines``, ADR 104).

A handler calls ``ctx.progress(...)`` as often as it likes. Each report is checked
first (a value the stores cannot carry is the handler's error, raised at once), then
shown in the worker's presence at most every ``live_every``, and recorded in the log
as ``ExecutionProgressed`` when ``ProgressPolicy.record`` says so, through the group
commit writer. A recorded report applies to the worker's copy of the execution; if
its save fails (the run was cancelled or its lease lost meanwhile), that copy is no
longer the log's, so the outcome is reported on a fresh one (``settled``).

Saves go one at a time, and none after one failed: the copy is then a version ahead
of the log, and a later save from it would land behind another writer's event (after
a cancellation, or for a lease that expired meanwhile) instead of conflicting.
"""

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from jobledger.domain.clock import Clock
from jobledger.domain.errors import DomainError
from jobledger.domain.execution import Execution
from jobledger.domain.progress import Progress, ProgressPolicy
from jobledger.infra.presence import Presence
from jobledger.infra.writer import GroupCommitWriter
from jobledger.projections.queue.backend import Lease
from jobledger.runtime.attempt_lines import AttemptLines
from jobledger.schemas.rows import ProgressRow

log = structlog.get_logger(__name__)


class RunningAttempt(Protocol):
    """What the reporter needs of the worker's running attempt."""

    execution: Execution
    lease: Lease


@dataclass
class AttemptProgress:
    """Reports of one attempt (see the module docstring)."""

    attempt: RunningAttempt
    writer: GroupCommitWriter
    presence: Presence | None
    now: Clock
    policy: ProgressPolicy = field(default_factory=ProgressPolicy)
    live_ttl: timedelta = timedelta(minutes=1)
    _shown_at: datetime | None = None
    _recorded: Progress | None = None
    _recorded_at: datetime | None = None
    _saves: list[Future[None]] = field(default_factory=list)
    _saving: asyncio.Lock = field(default_factory=asyncio.Lock)
    _diverged: bool = False  # a save failed: the copy is no longer the log's
    _closed: bool = False  # the outcome is being reported: nothing more is recorded

    async def report(self, progress: Progress) -> None:
        progress.check()
        at = self.now()
        if self.presence is not None and self.policy.show_live(self._shown_at, at):
            self._shown_at = at
            shown = ProgressRow(
                percent=progress.percent, message=progress.message, data=progress.data, at=at
            )
            await asyncio.to_thread(
                self.presence.show_progress, self.attempt.execution.id, shown, self.live_ttl
            )
        if self.policy.record(progress, self._recorded, self._recorded_at, at):
            self._recorded, self._recorded_at = progress, at
            await self._record(progress)

    async def record_lines(self, lines: AttemptLines) -> None:
        """Record the handler's lines of the last moment as ``ExecutionLogged``, saved
        as a progress report is (ADR 104); lines that could not be saved wait for the
        outcome, which is reported on a fresh copy."""
        async with self._saving:
            if self._closed or not await self._kept():
                return
            taken, dropped = lines.take()
            if taken or dropped:
                lease_id = self.attempt.lease.lease_id
                saved = await self._save(
                    lambda e: e.record_log(lease_id=lease_id, lines=taken, dropped=dropped)
                )
                if not saved:
                    lines.put_back(taken, dropped)

    async def _record(self, progress: Progress) -> None:
        lease_id = self.attempt.lease.lease_id
        async with self._saving:
            if not self._closed and await self._kept():
                await self._save(lambda e: e.report_progress(lease_id=lease_id, progress=progress))

    async def _save(self, command: Callable[[Execution], None]) -> bool:
        """Apply ``command`` to the copy and save it; False if it was not saved."""
        execution = self.attempt.execution
        try:
            command(execution)
        except DomainError:
            return False  # the lease is no longer current: the outcome's report will say so
        saved = self.writer.submit(execution)
        self._saves.append(saved)
        # Shielded: a handler cancelled by its timeout must not abandon the save, which
        # ``settled`` waits for before the outcome is applied. A failed save is not the
        # handler's failure: ``settled`` tells the worker to report on a fresh copy.
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.wrap_future(saved))
        return await self._kept()

    async def _kept(self) -> bool:
        """Wait for the saves so far; True while each was saved."""
        while self._saves:
            try:
                # Shielded, and dropped from the list only once known: a handler
                # cancelled meanwhile leaves it for ``settled``.
                await asyncio.shield(asyncio.wrap_future(self._saves[0]))
            except Exception as error:  # noqa: BLE001 (a lost save means: reload)
                log.info(
                    "worker.progress_not_saved",
                    execution_id=str(self.attempt.execution.id),
                    error=str(error),
                )
                self._diverged = True
            del self._saves[0]
        return not self._diverged

    async def settled(self) -> bool:
        """Wait for every recorded report's save and record no more; True if each was
        saved, so the worker's copy of the execution is still the log's."""
        async with self._saving:
            self._closed = True
            return await self._kept()
