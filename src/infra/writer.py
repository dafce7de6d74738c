"""The group-commit writer: many callers' saves become few transactions.

The PostgreSQL recorder locks the events table for every insert, so transactions, not
events, are the scarce resource: saving one event per transaction is several times
slower than saving a hundred (see bench/event_store.py for the figures). The writer takes
saves from any thread or task, and flushes them together when ``max_batch`` items are
waiting or ``max_delay`` has passed since the first one. A first item that comes after
a quiet spell (no batch taken within ``max_delay`` before it) goes at once, with what
is queued beside it: at low load there is no company to wait for, and a run's start
waited for it at every save on its way (ADR 100). When a batch hits a version
conflict it splits the batch to find the conflicting items and saves all the others;
an item that builds on a failed item's aggregate fails with it, so no stream gets an
event whose predecessor was rejected.

A store that cannot be reached holds the batch back, not its callers' outcomes: the
writer retries the same transaction with the back-off of the process's dependency
tracker until the store answers again, so an outcome reported during an outage is saved
when it ends. Only a closing writer gives up (its callers hear the error).
"""

import asyncio
import collections
import math
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Self
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate, DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from jobledger.domain.errors import ConflictError
from jobledger.infra.errors import WriterClosedError
from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import POSTGRESQL, DependencyHealth
from jobledger.persistence.ledger import Ledger

log = structlog.get_logger(__name__)

_STOP = "stop"
_FLUSH = "flush"


@dataclass(eq=False)
class _Item:
    events: list[DomainEventProtocol[UUID]]
    future: Future[None] = field(default_factory=Future)

    @property
    def originator_ids(self) -> set[UUID]:
        return {e.originator_id for e in self.events}


@dataclass
class WriterStats:
    """Counters a benchmark or a metrics exporter can read."""

    batches: int = 0
    items: int = 0
    events: int = 0
    conflicts: int = 0
    isolation_saves: int = 0


class GroupCommitWriter:
    """Batches saves of aggregates into shared transactions."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        max_batch: int = 100,
        max_delay: float = 0.005,
        metrics: Metrics | None = None,
        health: DependencyHealth | None = None,
    ) -> None:
        self._ledger = ledger
        self._metrics = metrics
        self._health = health
        self._max_batch = max_batch
        self._max_delay = max_delay
        # Items, or a marker: _STOP ends the writer, _FLUSH ends the batch being gathered.
        self._inbox: queue.SimpleQueue[_Item | str] = queue.SimpleQueue()
        # Ends the wait of a batch being gathered early: set by a flush, a full inbox or
        # the stop. Items alone do not wake the writer thread (see ``_next_batch``).
        self._wake = threading.Event()
        # Flush markers put in the inbox and not yet taken out (changed under the gate),
        # so that the writer never clears a wake-up a waiting flush still needs.
        self._flushes = 0
        self._closed = threading.Event()
        # Makes "check closed, then enqueue" atomic against close(), so no item can
        # land behind the stop marker and wait forever.
        self._gate = threading.Lock()
        # The writer thread's own connection: no pool checkout nor check per batch.
        self._held = ledger.held_connection()
        # When the last batch was taken (monotonic): a first item later than
        # ``max_delay`` after it came after a quiet spell, and does not wait.
        self._last_taken = -math.inf
        self._thread = threading.Thread(target=self._run, name="jobledger-writer", daemon=True)
        self.stats = WriterStats()
        self._thread.start()

    # ---- callers --------------------------------------------------------------------

    def submit(self, *aggregates: Aggregate) -> Future[None]:
        """Queue the pending events of ``aggregates`` to be saved together, atomically.

        The future resolves to None once saved, or raises ConflictError if another
        writer saved a clashing version first.
        """
        with self._gate:
            if self._closed.is_set():
                raise WriterClosedError
            events: list[DomainEventProtocol[UUID]] = []
            for aggregate in aggregates:
                events.extend(aggregate.collect_events())
            item = _Item(events)
            if not events:
                item.future.set_result(None)
            else:
                self._inbox.put(item)
                if self._batch_waiting():
                    self._wake.set()
        return item.future

    def save(self, *aggregates: Aggregate, timeout: float | None = None) -> None:
        self.submit(*aggregates).result(timeout)

    async def save_async(self, *aggregates: Aggregate) -> None:
        await asyncio.wrap_future(self.submit(*aggregates))

    def close(self, timeout: float = 10.0) -> None:
        """Flush what is queued, then stop."""
        with self._gate:
            if self._closed.is_set():
                return
            self._closed.set()
            self._inbox.put(_STOP)
            self._wake.set()
        self._thread.join(timeout)
        if self._held is not None and not self._thread.is_alive():
            self._held.close()

    # ---- the writer thread ----------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._next_batch()
            if batch:
                self._flush(batch)

    def flush(self) -> None:
        """Save what is queued now instead of waiting for more (a caller that knows it
        has submitted everything it had, like a scheduler tick)."""
        with self._gate:
            self._inbox.put(_FLUSH)
            self._flushes += 1
            self._wake.set()

    def _next_batch(self) -> tuple[list[_Item], bool]:
        """The next batch: the first item, then what came until ``max_delay`` passed,
        a flush, ``max_batch`` items or the stop. The thread sleeps through the items
        that come meanwhile and takes them all at the end: woken by each of them, as
        a blocking read of the inbox is, it paid a thread switch per item (ADR 66)."""
        first = self._inbox.get()
        if first == _STOP:
            return self._drain(), True
        if not isinstance(first, _Item):
            self._flush_taken()
            return [], False  # a flush with nothing gathered
        quiet = time.monotonic() - self._last_taken >= self._max_delay
        if not quiet and self._should_wait():
            self._wake.wait(self._max_delay)
        batch = [first]
        while len(batch) < self._max_batch:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item == _STOP:
                return batch + self._drain(), True
            if not isinstance(item, _Item):
                self._flush_taken()
                break  # flush: the caller has nothing more for this batch
            batch.append(item)
        self._last_taken = time.monotonic()
        return batch, False

    def _should_wait(self) -> bool:
        """Whether to wait for more items; if so, the wake-up is cleared first. Under
        the gate: a flush, a submit that fills the batch or the stop comes either before
        this look (and it says no) or after the clear (and sets the wake-up again)."""
        with self._gate:
            if self._flushes or self._closed.is_set() or self._batch_waiting():
                return False
            self._wake.clear()
            return True

    def _batch_waiting(self) -> bool:
        """Whether a full batch is queued, counting the first item, which the gathering
        writer holds already."""
        return self._inbox.qsize() + 1 >= self._max_batch

    def _flush_taken(self) -> None:
        with self._gate:
            self._flushes -= 1

    def _drain(self) -> list[_Item]:
        items: list[_Item] = []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return items
            if isinstance(item, _Item):
                items.append(item)

    def _flush(self, batch: list[_Item]) -> None:
        for start in range(0, len(batch), self._max_batch):
            chunk = batch[start : start + self._max_batch]
            try:
                self._save_isolating(chunk, failed_ids=set())
            except Exception as error:  # noqa: BLE001 (every caller must hear of the failure)
                log.warning("writer.batch_failed", items=len(chunk), error=str(error))
                for item in chunk:
                    if not item.future.done():
                        item.future.set_exception(error)

    def _save_isolating(self, items: Sequence[_Item], failed_ids: set[UUID]) -> None:
        """Save ``items`` in order; on a conflict, split until the culprits are found."""
        # Only a split batch has failed ids: a first try asks no item for its ids.
        ready = (
            [i for i in items if not self._fail_if_dependent(i, failed_ids)]
            if failed_ids
            else items
        )
        if not ready:
            return
        try:
            events = self._save(ready)
        except IntegrityError as error:
            if len(ready) == 1:
                self._fail_conflict(ready[0], error, failed_ids)
                return
            middle = len(ready) // 2
            self.stats.isolation_saves += 1
            self._save_isolating(ready[:middle], failed_ids)
            self._save_isolating(ready[middle:], failed_ids)
            return
        for item in ready:
            item.future.set_result(None)
        self._snapshot(events)

    def _snapshot(self, events: list[DomainEventProtocol[UUID]]) -> None:
        # After the callers were answered: a snapshot only speeds up later loads, and
        # failing to take one changes nothing that was saved.
        try:
            self._ledger.snapshot_due(events)
        except Exception as error:  # noqa: BLE001 (the next interval takes another)
            log.warning("writer.snapshot_failed", error=str(error))

    def _save(self, items: Sequence[_Item]) -> list[DomainEventProtocol[UUID]]:
        """Save ``items`` in one transaction; returns the events saved."""
        events = [e for item in items for e in item.events]
        started = time.perf_counter()
        self._save_through_outages(events)
        self.stats.batches += 1
        self.stats.items += len(items)
        self.stats.events += len(events)
        if self._metrics is not None:
            self._record(self._metrics, events, time.perf_counter() - started)
        return events

    def _save_through_outages(self, events: list[DomainEventProtocol[UUID]]) -> None:
        """One transaction, tried again after each failure that means the store is
        unreachable, until it answers or the writer closes."""
        health = self._health
        while True:
            try:
                self._ledger.save_events(events, self._held)
            except Exception as error:
                pause = None if health is None else health.report(error, health.clock())
                if pause is None or self._closed.is_set():
                    raise
                # Woken early by close(), which gets one more try before giving up.
                self._closed.wait(pause)
                continue
            if health is not None:
                health.succeeded(POSTGRESQL, health.clock())
            return

    @staticmethod
    def _record(metrics: Metrics, events: list[DomainEventProtocol[UUID]], seconds: float) -> None:
        metrics.append_latency.observe(seconds)
        metrics.append_batch.observe(len(events))
        # Counted in C, then one counter update per event type in the batch.
        for kind, count in collections.Counter(map(type, events)).items():
            metrics.events_appended.labels(type=kind.__qualname__).inc(count)

    def _fail_if_dependent(self, item: _Item, failed_ids: set[UUID]) -> bool:
        clash = item.originator_ids & failed_ids
        if clash:
            self._fail_conflict(item, None, failed_ids)
        return bool(clash)

    def _fail_conflict(self, item: _Item, cause: Exception | None, failed_ids: set[UUID]) -> None:
        ids = item.originator_ids
        failed_ids.update(ids)
        self.stats.conflicts += 1
        error = ConflictError(
            "a concurrent change was saved first for " + ", ".join(sorted(str(i) for i in ids))
        )
        error.__cause__ = cause
        item.future.set_exception(error)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
