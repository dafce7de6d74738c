"""Waiting for executions to finish: the long-poll behind ``GET
/api/v1/executions/{id}?wait=S``.

A waiter is a future on the event loop, not a thread. One poller task per event loop
runs while anyone waits: when the read models' follower rings (``moved``: it applied a
page), and every ``interval`` in case a ring was lost, it reads the status of every
awaited execution in one query (``Views.statuses``), on one worker thread, and wakes
the waiters of those that reached a terminal status. So the read model sees at most one
query per page applied or interval however many wait, the server holds no thread per
waiter, and a waiter hears of its execution as soon as the read model shows it
(ADR 97).

A dead letter the read model shows is taken as the answer only if the read model has
caught up with the execution's stream in the log (the other ends are final): right
after a requeue the read model may still show the dead letter it was, and a client that
requeues and then waits must hear of the new attempt, not of the old one.
"""

import asyncio
import contextlib
import weakref
from uuid import UUID

import structlog

from jobledger.domain.execution import TERMINAL, ExecutionStatus
from jobledger.projections.bell import Bell
from jobledger.projections.read_models.follower import MOVED
from jobledger.schemas.executions import ExecutionDetail
from jobledger.services.errors import NotYetVisibleError
from jobledger.services.views import Views

log = structlog.get_logger(__name__)

MAX_WAIT_SECONDS = 60.0
# Beyond this many waiters a request answers at once (its client asks again): a cap on
# what one process holds for clients, not a limit on who may wait in the end.
MAX_WAITERS = 10_000
_TERMINAL = frozenset(status.value for status in TERMINAL)
# The one end the log can move past: a dead letter is requeued or discarded; the others
# are final. Only an answer with it asks the log whether there is more.
_REOPENABLE = ExecutionStatus.DEAD_LETTERED.value


class _LoopWaiters:
    """The waiters of one event loop and the task that polls for them."""

    def __init__(self) -> None:
        # By execution: each waiter's future and the least version it waits for.
        self.waiting: dict[UUID, dict[asyncio.Future[None], int]] = {}
        self.poller: asyncio.Task[None] | None = None
        # Set when the read models moved (the bell's thread sets it through the loop).
        self.moved = asyncio.Event()
        self.listening = False

    def count(self) -> int:
        return sum(len(futures) for futures in self.waiting.values())


class ExecutionWaits:
    """Wait until executions finish, without a thread per waiter; see the module doc."""

    def __init__(self, views: Views, *, interval: float = 0.05, moved: Bell | None = None) -> None:
        self.views = views
        self.interval = interval
        self._moved = moved
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaiters] = (
            weakref.WeakKeyDictionary()
        )

    async def detail(self, execution_id: UUID, *, wait: float) -> ExecutionDetail:
        """The execution with its attempts, once it is terminal or after ``wait`` seconds
        (at most ``MAX_WAIT_SECONDS``), whichever comes first. A run the read model does
        not show yet is waited for too; a NotFoundError if the log has no such run."""
        detail = await self._current(execution_id)
        at_least = 0
        if detail is not None and _finished(detail):
            at_least = await self._moved_on(execution_id, detail)
            if not at_least:
                return detail
        within = min(max(wait, 0.0), MAX_WAIT_SECONDS)
        await self.until_finished(execution_id, within=within, at_least=at_least)
        detail = await asyncio.to_thread(self.views.execution_detail, execution_id)
        if at_least and _finished(detail) and detail.execution.version < at_least:
            raise NotYetVisibleError(
                f"execution {execution_id} changed in the log after the end the read "
                "model still shows",
                fix="retry in a moment",
            )
        return detail

    async def _moved_on(self, execution_id: UUID, detail: ExecutionDetail) -> int:
        """The log's version of the execution if it is past the version ``detail``
        shows (a requeue the read model has not shown yet), else 0."""
        if detail.execution.status != _REOPENABLE:
            return 0
        logged = await asyncio.to_thread(self.views.log_version, execution_id)
        return logged if logged is not None and logged > detail.execution.version else 0

    async def until_finished(self, execution_id: UUID, *, within: float, at_least: int = 0) -> bool:
        """Whether the execution reached a terminal status, at version ``at_least`` or
        later, within ``within`` seconds."""
        waiters = self._waiters()
        if within <= 0 or waiters.count() >= MAX_WAITERS:
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.waiting.setdefault(execution_id, {})[future] = at_least
        if waiters.poller is None or waiters.poller.done():
            self._listen(waiters)
            waiters.poller = asyncio.create_task(self._poll(waiters))
        try:
            await asyncio.wait_for(future, within)
        except TimeoutError:
            return False
        finally:
            _forget(waiters, execution_id, future)
        return True

    async def _current(self, execution_id: UUID) -> ExecutionDetail | None:
        """The run's detail if it has ended; None if it is still open or not in the read
        model yet (wait for it as well). An open run's status is read alone: its whole
        detail (its attempts, its stream's input and lines) is read once it ends."""
        statuses = await asyncio.to_thread(self.views.statuses, [execution_id])
        found = statuses.get(execution_id)
        if found is not None and found[0] not in _TERMINAL:
            return None
        try:
            return await asyncio.to_thread(self.views.execution_detail, execution_id)
        except NotYetVisibleError:
            return None

    def _waiters(self) -> _LoopWaiters:
        loop = asyncio.get_running_loop()
        waiters = self._loops.get(loop)
        if waiters is None:
            waiters = self._loops[loop] = _LoopWaiters()
        return waiters

    def _listen(self, waiters: _LoopWaiters) -> None:
        """Listen for the read models' pages, once per event loop (the bell's owner
        closes the listener with the process's stores)."""
        if self._moved is None or waiters.listening:
            return
        loop, moved = asyncio.get_running_loop(), waiters.moved

        def woken() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(moved.set)

        self._moved.listen(MOVED, woken)
        waiters.listening = True

    async def _poll(self, waiters: _LoopWaiters) -> None:
        while waiters.waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiters.moved.wait(), self.interval)
            waiters.moved.clear()
            ids = list(waiters.waiting)
            try:
                statuses = await asyncio.to_thread(self.views.statuses, ids)
            except Exception as error:  # noqa: BLE001 (an outage: the waiters time out or the next poll reads)
                log.warning("waits.poll_failed", waiting=len(ids), error=type(error).__name__)
                continue
            for execution_id, (status, version) in statuses.items():
                if status in _TERMINAL:
                    _wake(waiters, execution_id, version)


def _wake(waiters: _LoopWaiters, execution_id: UUID, version: int) -> None:
    """Wake the waiters of a terminal execution whose version they wait for."""
    futures = waiters.waiting.get(execution_id, {})
    for future, at_least in list(futures.items()):
        if at_least <= version:
            del futures[future]
            if not future.done():
                future.set_result(None)
    if not futures:
        waiters.waiting.pop(execution_id, None)


def _finished(detail: ExecutionDetail) -> bool:
    return detail.execution.status in _TERMINAL


def _forget(waiters: _LoopWaiters, execution_id: UUID, future: asyncio.Future[None]) -> None:
    futures = waiters.waiting.get(execution_id)
    if futures is not None:
        futures.pop(future, None)
        if not futures:
            del waiters.waiting[execution_id]
