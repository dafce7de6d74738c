"""The progress of one running attempt: shown live, recorded in the log when due; and
the lines its handler logged, recorded as they come (``record_lines``, ADR 104).

A handler calls ``ctx.progress(...)`` as often as it likes. Each report is checked
first (a value the stores cannot carry is the handler's error, raised at once), then
shown in the worker's presence at most every ``live_every``, and recorded in the log
as ``ExecutionProgressed`` when ``ProgressPolicy.record`` says so, through the group
commit writer. A recorded report applies to the worker's copy of the execution; if
its save fails (the run was cancelled or its lease lost meanwhile), that copy is no
longer the log's, so the outcome is reported on a fresh one (``settled``).
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
from jobledger.domain.run_logs import LogLine
from jobledger.infra.presence import Presence
from jobledger.infra.writer import GroupCommitWriter
from jobledger.projections.queue.backend import Lease
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

    async def record_lines(self, lines: list[LogLine], dropped: int) -> None:
        """Record the handler's lines of the last moment as ``ExecutionLogged``, saved
        as a progress report is (ADR 104)."""
        if lines or dropped:
            lease_id = self.attempt.lease.lease_id
            await self._save(
                lambda e: e.record_log(lease_id=lease_id, lines=lines, dropped=dropped)
            )

    async def _record(self, progress: Progress) -> None:
        lease_id = self.attempt.lease.lease_id
        await self._save(lambda e: e.report_progress(lease_id=lease_id, progress=progress))

    async def _save(self, command: Callable[[Execution], None]) -> None:
        execution = self.attempt.execution
        try:
            command(execution)
        except DomainError:
            return  # the lease is no longer current: the outcome's report will say so
        saved = self.writer.submit(execution)
        self._saves.append(saved)
        # Shielded: a handler cancelled by its timeout must not abandon the save, which
        # ``settled`` waits for before the outcome is applied. A failed save is not the
        # handler's failure: ``settled`` tells the worker to report on a fresh copy.
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.wrap_future(saved))

    async def settled(self) -> bool:
        """Wait for every recorded report's save; True if each was saved, so the
        worker's copy of the execution is still the log's."""
        kept = True
        for saved in self._saves:
            try:
                await asyncio.wrap_future(saved)
            except Exception as error:  # noqa: BLE001 (a lost save means: reload)
                log.info(
                    "worker.progress_not_saved",
                    execution_id=str(self.attempt.execution.id),
                    error=str(error),
                )
                kept = False
        return kept
