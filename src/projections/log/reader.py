"""Following the notification log: pages in order, woken by a listener, held up by
polling.

A store with channels wakes followers when a save commits (PostgreSQL's LISTEN/NOTIFY:
eventsourcing's recorder sends a NOTIFY with every insert; ``adapters.postgres.listener``).
A notification can be lost, and the listening connection can drop, so a follower also
polls: a lost wake-up only delays, it never stalls. SQLite has no notifications;
followers there only poll.
"""

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol
from uuid import UUID

import structlog
from eventsourcing.persistence import Mapper

from jobledger.domain.execution import Execution
from jobledger.domain.limits import Limit
from jobledger.domain.queue import Queue
from jobledger.domain.topics import event_topics
from jobledger.infra.background import Background
from jobledger.persistence.codec import EventView, MsgspecMapper, row_decoder
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import Held, LivePage, LogRow, RowPage, RowRead, Window

log = structlog.get_logger(__name__)

EXECUTION_EVENTS = event_topics(Execution)
# What the queue and its checkpoint follow: the executions, the queues' pauses and the
# named limits.
QUEUE_EVENTS = tuple(sorted(EXECUTION_EVENTS + event_topics(Queue) + event_topics(Limit)))


# How long ``LogReader.release`` waits for a read under way on its kept connection.
_RELEASE_WAIT = 5.0


class LogReader:
    """Events of the ledger's log, a page at a time: those the queue folds (execution
    and queue events) unless told other ``topics`` (``()``: every event)."""

    def __init__(
        self,
        ledger: Ledger,
        page_size: int = 2000,
        *,
        topics: Sequence[str] = QUEUE_EVENTS,
        part: tuple[int, int] | None = None,
        text_ids: bool = False,
        views: Sequence[EventView] = (),
    ) -> None:
        self.ledger = ledger
        self.page_size = page_size
        self.topics = tuple(topics)
        self.part = part
        self.text_ids = text_ids and isinstance(ledger.mapper, MsgspecMapper)
        self.views = tuple(views)
        # A connection kept for live pages while a follower runs (``hold``); one read
        # at a time on it, whichever thread asks.
        self._held: Held | None = None
        self._held_lock = threading.Lock()
        self._decode = self._decoder(ledger.mapper)

    def _decoder(self, mapper: Mapper[UUID]) -> Callable[[UUID | str, int, str, bytes], Any]:
        """How this reader decodes a row: through its ``views``, if any (a fold that
        reads a few fields of its most frequent events); keeping the id as text, if
        ``text_ids``."""
        if not isinstance(mapper, MsgspecMapper):
            return row_decoder(mapper)
        if not self.views:
            return mapper.decode_keyed if self.text_ids else mapper.decode_event
        viewed = mapper.viewed(self.views)
        if self.text_ids:
            return viewed

        def decode(originator_id: UUID | str, version: int, topic: str, state: bytes) -> Any:  # noqa: ANN401 (any domain event)
            if not isinstance(originator_id, UUID):
                originator_id = UUID(originator_id)
            return viewed(originator_id, version, topic, state)

        return decode

    def head(self) -> int:
        return self.ledger.recorder.max_notification_id() or 0

    def hold(self) -> None:
        """Read live pages on a connection of the event store's pool kept for this
        reader (PostgreSQL), until ``release``: a follower reads page after page, and
        each checkout of the pool checks the connection with a query of its own."""
        with self._held_lock:
            if self._held is None:
                self._held = self.ledger.held_connection()

    def release(self) -> None:
        """Give the kept connection back to the pool (later pages take one each). A
        read still under way on it (a follower that outlived its stop, in an outage)
        is waited for a few seconds at most: the pool's close ends it anyway."""
        locked = self._held_lock.acquire(timeout=_RELEASE_WAIT)
        try:
            held, self._held = self._held, None
            if held is not None:
                held.close()
        finally:
            if locked:
                self._held_lock.release()

    def of_topics(self, topics: Sequence[str]) -> "LogReader":
        """A reader of the same log, pages as large, of ``topics`` only."""
        return LogReader(
            self.ledger, self.page_size, topics=topics, text_ids=self.text_ids, views=self.views
        )

    def with_text_ids(self) -> "LogReader":
        """The same reader, whose events carry their stream's id as text where
        PostgreSQL gives it so (a page read up to a stop): for a fold keyed on the text,
        which would otherwise format a ``UUID`` for every event. Such an event is for
        that fold only."""
        return LogReader(
            self.ledger,
            self.page_size,
            topics=self.topics,
            part=self.part,
            text_ids=True,
            views=self.views,
        )

    def page(self, after: int, stop: int | None = None) -> tuple[list[Any], int]:
        page = self.rows(after, stop)
        return list(self.events(page.rows)), page.position

    def rows(self, after: int, stop: int | None = None, limit: int | None = None) -> RowPage:
        """The next page of events as stored rows (``events`` decodes them)."""
        limit = limit or self.page_size
        # A live page goes on the kept connection, if any; one read at a time on it.
        live = self._held is not None and stop is None
        with self._held_lock if live else contextlib.nullcontext():
            read: RowRead = (
                LivePage(limit, self.topics, self._held if live else None)
                if stop is None and self.part is None
                else Window(limit, self.topics, stop, self.part, self.text_ids)
            )
            return self.ledger.log_store.read_rows(after, read)

    def events(self, rows: Iterable[LogRow]) -> Iterator[Any]:
        """The domain events of ``rows``, one at a time (a replay never holds a page)."""
        decode = self._decode
        for _id, originator_id, version, topic, state in rows:
            yield decode(originator_id, version, topic, state)

    def event(self, row: LogRow) -> Any:  # noqa: ANN401 (any domain event)
        _id, originator_id, version, topic, state = row
        return self._decode(originator_id, version, topic, state)

    @property
    def decode(self) -> Callable[[UUID | str, int, str, bytes], Any]:
        """How this reader reads one row's event from its columns (originator id,
        version, topic, state): for a loop over many rows, a call less than ``event``."""
        return self._decode

    def row_at(self, position: int) -> LogRow | None:
        """The stored event at ``position`` (any topic), or None."""
        page = self.ledger.log_store.read_rows(position - 1, Window(1, stop=position))
        return next((row for row in page.rows if row[0] == position), None)


def part_of(stream: UUID, count: int) -> int:
    """The share ``stream`` is in, as a store selects it for ``part`` (PostgreSQL's
    ``PART_OF``: the last byte of the id modulo the count)."""
    return stream.bytes[15] % count


class StepHealth(Protocol):
    """Where a follower or the listener reports its tries: the process's dependency
    tracker, which says an outage once and paces the tries while it lasts."""

    def failed(self, error: BaseException) -> float | None:
        """The pause before the next try if ``error`` means a store is unreachable;
        None for any other error (the caller logs that one itself)."""
        ...

    def succeeded(self) -> None: ...


class Wakeup:
    """A flag set by LISTEN notifications (or anyone) that a follower waits on."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        woke = self._event.wait(timeout)
        self._event.clear()
        return woke

    def take(self) -> bool:
        """Whether it was set since the last ``wait`` or ``take``, without waiting; clears
        it. A set that comes after this still counts for the next call."""
        if not self._event.is_set():
            return False
        self._event.clear()
        return True


# The channel eventsourcing's recorder NOTIFYs with every save, on stores that have one.
LOG_CHANNEL = "jobledger_events"


class Listener(Protocol):
    """A thread that wakes followers when a store's channel says something committed."""

    @property
    def connections(self) -> int:
        """How often it (re)connected: tests and benchmarks read it."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Listen(Protocol):
    """How a role listens on a channel of its store (a store that has channels names
    one, in the composition root): a ``Listener`` that wakes ``wakeups``."""

    def __call__(
        self, channel: str, wakeups: Sequence[Wakeup], *, health: StepHealth | None = None
    ) -> Listener: ...


class Follower(Background):
    """Runs ``step`` whenever the log may have moved: on a wake-up or every poll interval.

    ``step`` returns True if it did work (so the follower runs it again at once). An
    exception in ``step`` is logged and retried after a back-off: the follower is its
    own supervisor, and nothing but ``stop`` ends it. Steps isolate an event they
    cannot apply themselves (``quarantine``), so what reaches this loop is an outage.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], bool],
        wakeup: Wakeup,
        *,
        poll_interval: float = 0.5,
        max_backoff: float = 5.0,
        coalesce: float | Callable[[], float] = 0.0,
        spacing: float = 0.0,
        health: StepHealth | None = None,
    ) -> None:
        self.name = name
        self._step = step
        self._wakeup = wakeup
        self._poll_interval = poll_interval
        # After a wake-up, let more events arrive before reading: under load a page of
        # many events costs about what a page of one does (a query and a transaction).
        # A callable decides at each wake-up (the read models: by their last page).
        self._coalesce = coalesce
        # After a step that did work, the next one starts no sooner than this after it
        # began: under a steady stream of events each page gathers a few milliseconds'
        # worth instead of the one or two that came during the last step, while the
        # first event after a quiet spell is still read at once.
        self._spacing = spacing
        self._max_backoff = max_backoff
        self._health = health
        self.failures = 0
        super().__init__(name)

    def _wake(self) -> None:
        self._wakeup.set()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                busy = self._step()
            except Exception as error:
                self.failures += 1
                # An unreachable store is the tracker's to report, once per outage.
                pause = None if self._health is None else self._health.failed(error)
                if pause is None:
                    log.exception("follower.step_failed", follower=self.name, error=str(error))
                    pause, backoff = backoff, min(backoff * 2, self._max_backoff)
                self._stopping.wait(pause)
                continue
            if self._health is not None:
                self._health.succeeded()
            backoff = 0.1
            if busy:
                self._pace(began)
            elif self._wakeup.wait(self._poll_interval):
                self._gather()

    def _gather(self) -> None:
        coalesce = self._coalesce() if callable(self._coalesce) else self._coalesce
        if coalesce > 0:
            self._stopping.wait(coalesce)

    def _pace(self, began: float) -> None:
        rest = began + self._spacing - time.monotonic()
        if rest > 0:
            self._stopping.wait(rest)


def monotonic_ms() -> float:
    return time.monotonic() * 1000
