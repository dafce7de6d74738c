"""The handler contract: an async callable that gets a context and returns a summary."""

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

import structlog

from jobledger.domain.policies import check_snooze
from jobledger.domain.progress import Progress

T = TypeVar("T")


class HandlerError(Exception):
    """The handler failed; the message becomes the attempt's error."""


class HandlerCancelledError(HandlerError):
    """The handler stopped because it was asked to (cancellation, shutdown, lost lease);
    that says nothing about the health of what it calls."""


class PayloadRefusedError(HandlerError):
    """The handler refused this execution's own input before calling anything: a
    destination the SSRF guard refuses, an invalid URL, a command off the allowlist.
    It is that execution's error and says nothing about the health of what the handler
    calls, so the handler's circuit breaker does not count it."""


class HandlerDecision(HandlerError):  # noqa: N818 (the base of decisions, not errors)
    """Not a failure of what the handler calls but its decision about this run (a
    permanent failure, a snooze, a discard): the circuit breaker does not count it."""

    reason: str


class PermanentError(HandlerDecision):
    """No attempt of this run can succeed (bad input, a record that is gone): the run
    is dead-lettered at once, with the attempts it has left unspent."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Snooze(HandlerDecision):
    """Run this again ``seconds`` from now (0 to 7 days), without spending an attempt:
    the resource is not ready yet, a rate window is closed."""

    def __init__(self, seconds: float, reason: str = "snoozed by the handler") -> None:
        self.delay = timedelta(seconds=seconds)
        # A snooze out of range fails the attempt with the error naming the range.
        check_snooze(self.delay)
        super().__init__(f"snoozed for {seconds:g} s: {reason}")
        self.reason = reason


class Discard(HandlerDecision):
    """Drop this run for good: it is discarded (not failed), with ``reason``, and never
    tried again (the work is moot: the order was cancelled, the user deleted)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CircuitOpenError(HandlerError):
    """The handler's circuit breaker is open: the execution is deferred, not failed."""


class ProgressSink(Protocol):
    """Where a handler's progress reports go (the worker's reporter of the attempt)."""

    async def report(self, progress: Progress) -> None: ...


@dataclass
class HandlerContext:
    """What a handler gets for one attempt."""

    execution_id: UUID  # stable across attempts: use it as the idempotency key
    job_id: UUID | None
    attempt: int
    lease_deadline: datetime
    payload: dict[str, Any]
    # The occurrence a scheduled run is for (the period a report covers, say); None for
    # a triggered or ad-hoc run.
    scheduled_for: datetime | None = None
    # The results of the runs this one waited for: by step name for a workflow step,
    # by upstream job id for a job's dependency; empty for a run that waited for none.
    upstream_results: dict[str, Any] = field(default_factory=dict)
    # The workflow and the step this run is, for a workflow step.
    workflow_id: UUID | None = None
    step: str | None = None
    # Set when the execution was cancelled or the lease was lost: stop soon.
    cancelled: threading.Event = field(default_factory=threading.Event)
    log: Any = field(default_factory=lambda: structlog.get_logger("jobledger.handler"))
    # The worker's threads for blocking handler code (None: asyncio's default pool).
    threads: Executor | None = None
    # Where progress reports go; None where nothing runs the attempt (a unit test).
    progress_sink: ProgressSink | None = None

    async def progress(
        self, percent: float | None = None, message: str = "", data: dict[str, Any] | None = None
    ) -> None:
        """Say how far the run has got: ``percent`` from 0 to 100 (None: unknown), a
        short ``message`` and small JSON ``data``. Call it as often as you like: live
        views show it at most once a second, and the log records the first report, each
        new message, and otherwise one every 10 s. A value the stores cannot carry
        raises ``InvalidDefinitionError`` naming it."""
        report = Progress(percent=percent, message=message, data=data or {})
        if self.progress_sink is None:
            report.check()
            return
        await self.progress_sink.report(report)

    async def in_thread(self, function: Callable[[], T]) -> T:
        """Run blocking ``function`` on one of the worker's handler threads. It cannot
        be interrupted: on a timeout or cancellation the run ends, and the function
        keeps its thread until it returns, so let it watch ``cancelled``."""
        # In a copy of this context: what the function logs is its attempt's too.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.threads, context.run, function)

    async def sleep(self, seconds: float) -> bool:
        """Sleep, waking early on cancellation; returns False if cancelled."""
        deadline = asyncio.get_running_loop().time() + seconds
        while not self.cancelled.is_set():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return True
            await asyncio.sleep(min(remaining, 0.05))
        return False


Handler = Callable[[HandlerContext], Awaitable[dict[str, Any]]]
