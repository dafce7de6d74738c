"""The log as a live stream (``GET /api/v1/events/stream``): every event in order from
a position, filtered by type, job and queue, for the dashboard and for integrations
(ADR 106).

A stream reads the log a page at a time as the audit does, then waits until the read
models move on (their bell rings after each page they apply), so a client that reacts
to an event by reading a page sees what the event changed. One listener on the bell
serves every stream of the process. A stream ends after ``most_seconds`` (the client
reconnects from the position it last saw: ``Last-Event-ID``), and at once when the
API stops, so no stream holds up a shutdown.
"""

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from uuid import UUID

from jobledger.projections.bell import Bell, Listening
from jobledger.projections.read_models.follower import MOVED
from jobledger.schemas.events import EventOut, EventPage
from jobledger.services.system import System
from jobledger.services.views import Views

# Events a stream reads from the log at once.
STREAM_PAGE = 200
# A comment this often keeps proxies and the client from taking a quiet stream for dead.
HEARTBEAT_SECONDS = 15.0
# How often a stream asks whether its credential still holds (a session signed out or
# expired, a token revoked): it ends within this once it does not.
RECHECK_SECONDS = 5.0
# The runs whose job and queue a stream remembers (a job or queue filter needs them).
_PLACED_MOST = 50_000


@dataclass(frozen=True)
class StreamFilter:
    """Which events a stream carries: of these types (none: all), of this job (its own
    events and its runs'), of this queue (its runs' and the queue's own)."""

    types: frozenset[str] = frozenset()
    job_id: UUID | None = None
    queue: str | None = None

    @property
    def placed(self) -> bool:
        return self.job_id is not None or self.queue is not None


class EventStream:
    """Live streams of the log (see the module docstring)."""

    def __init__(self, system: System, views: Views, moved: Bell | None) -> None:
        self._system = system
        self._views = views
        self._rings = _Rings(moved)
        self._closing = threading.Event()

    def close(self) -> None:
        """End every stream at its next step: the API is stopping."""
        self._closing.set()
        self._rings.wake_all()

    async def head(self) -> int:
        """The position of the newest event: where a stream with no position starts."""
        return await asyncio.to_thread(self._system.head)

    async def follow(
        self,
        after: int,
        wanted: StreamFilter,
        *,
        most_seconds: float,
        allowed: Callable[[], bool] = lambda: True,
    ) -> AsyncIterator[EventOut | None]:
        """The events after position ``after`` that ``wanted`` lets through, as they
        come; None now and then while there are none (a heartbeat). It ends after
        ``most_seconds``, or once ``allowed`` (asked every ``RECHECK_SECONDS``, on a
        thread) says the caller may no longer read."""
        ends = time.monotonic() + most_seconds
        placements = _Placements(self._views)
        position = after
        checked = sent = time.monotonic()
        rang = self._rings.subscribe()
        try:
            while not self._closing.is_set() and (left := ends - time.monotonic()) > 0:
                if time.monotonic() - checked >= RECHECK_SECONDS:
                    if not await asyncio.to_thread(allowed):
                        return
                    checked = time.monotonic()
                page = await asyncio.to_thread(self._page, position, wanted.types)
                for event in await asyncio.to_thread(placements.keep, page.items, wanted):
                    sent = time.monotonic()
                    yield event
                position = page.next_after
                if position < page.head:
                    continue  # more to read now
                rang.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(rang.wait(), min(RECHECK_SECONDS, left))
                if time.monotonic() - sent >= HEARTBEAT_SECONDS:
                    sent = time.monotonic()
                    yield None
        finally:
            self._rings.unsubscribe(rang)

    def _page(self, after: int, types: frozenset[str]) -> EventPage:
        return self._system.audit_page(
            after=after, types=types, since=None, until=None, limit=STREAM_PAGE
        )


class _Rings:
    """One listener on the read models' bell for every stream of the process: each
    stream gets an asyncio event of its own, set (on its loop) at each ring."""

    def __init__(self, bell: Bell | None) -> None:
        self._bell = bell
        self._lock = threading.Lock()
        self._waiting: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}
        self._listening: Listening | None = None

    def subscribe(self) -> asyncio.Event:
        rang = asyncio.Event()
        with self._lock:
            self._waiting[rang] = asyncio.get_running_loop()
            if self._listening is None and self._bell is not None:
                self._listening = self._bell.listen(MOVED, self.wake_all)
        return rang

    def unsubscribe(self, rang: asyncio.Event) -> None:
        with self._lock:
            self._waiting.pop(rang, None)

    def wake_all(self) -> None:
        with self._lock:
            waiting = list(self._waiting.items())
        for rang, loop in waiting:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                loop.call_soon_threadsafe(rang.set)


class _Placements:
    """The job and queue of each run a stream has seen, to filter by them: from the
    run's first event when the stream sees it, else from the read models once."""

    def __init__(self, views: Views) -> None:
        self._views = views
        self._runs: dict[UUID, tuple[UUID | None, str | None]] = {}

    def keep(self, events: list[EventOut], wanted: StreamFilter) -> list[EventOut]:
        """``events`` (of the wanted types already) that belong to the wanted job and
        queue."""
        if not wanted.placed:
            return events
        return [e for e in events if self._matches(e, wanted)]

    def _matches(self, event: EventOut, wanted: StreamFilter) -> bool:
        job_id, queue = self._place(event)
        if wanted.job_id is not None and job_id != wanted.job_id:
            return False
        return wanted.queue is None or queue == wanted.queue

    def _place(self, event: EventOut) -> tuple[UUID | None, str | None]:
        """The job and queue an event belongs to (None where it belongs to none)."""
        kind, data = event.type, event.data
        if kind.startswith("Job"):
            return event.aggregate_id, None
        if kind.startswith("Queue"):
            queue = data.get("queue")
            return None, queue if isinstance(queue, str) else None
        if not kind.startswith("Execution"):
            return None, None
        return self._run(event)

    def _run(self, event: EventOut) -> tuple[UUID | None, str | None]:
        run_id, data = event.aggregate_id, event.data
        if event.type in ("ExecutionEnqueued", "ExecutionSkipped"):
            job_id, spec = data.get("job_id"), data.get("spec")
            queue = spec.get("queue") if isinstance(spec, dict) else None
            placed = (UUID(job_id) if isinstance(job_id, str) else None, queue)
        elif run_id in self._runs:
            return self._runs[run_id]
        else:
            row = self._views.execution(run_id)
            placed = (None, None) if row is None else (row.job_id, row.queue)
        if len(self._runs) >= _PLACED_MOST:
            self._runs.clear()
        self._runs[run_id] = placed
        return placed
