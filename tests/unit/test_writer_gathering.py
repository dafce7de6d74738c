"""How the group-commit writer gathers a batch: it sleeps through the items that come
meanwhile, and ends the wait early for a flush, a full batch or the stop."""

import queue
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

import pytest
from eventsourcing.domain import Aggregate

from jobledger.infra.writer import GroupCommitWriter

if TYPE_CHECKING:
    from jobledger.persistence.ledger import Ledger


class Note(Aggregate):
    """An aggregate with one pending event: something for the writer to save."""


class Batches:
    """A ledger that records the size of every batch it is asked to save."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def held_connection(self) -> None:
        return None  # no connection to keep: nothing here is PostgreSQL

    def save_events(self, events: list[object], _held: object = None) -> None:
        self.sizes.append(len(events))

    def snapshot_due(self, _events: list[object]) -> None:
        return None


class CountingInbox(queue.SimpleQueue[Any]):
    """An inbox that counts the reads that may block (each wakes the writer's thread
    when an item arrives)."""

    blocking_reads = 0

    def get(self, block: bool = True, timeout: float | None = None) -> Any:  # noqa: FBT002 (SimpleQueue's signature)
        if block:
            CountingInbox.blocking_reads += 1
        return super().get(block, timeout)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[CountingInbox]:
    CountingInbox.blocking_reads = 0
    # The writer makes its inbox as ``queue.SimpleQueue()``: the module is shared.
    monkeypatch.setattr(queue, "SimpleQueue", CountingInbox)
    return CountingInbox


def writer_of(ledger: Batches, *, max_batch: int, max_delay: float) -> GroupCommitWriter:
    return GroupCommitWriter(cast("Ledger", ledger), max_batch=max_batch, max_delay=max_delay)


def trickle(writer: GroupCommitWriter, count: int, pause: float) -> list[Future[None]]:
    """Submit ``count`` items, ``pause`` seconds apart."""
    futures = []
    for _ in range(count):
        futures.append(writer.submit(Note()))
        time.sleep(pause)
    return futures


def wait_all(futures: list[Future[None]]) -> None:
    for future in futures:
        assert future.result(timeout=10) is None


def warmed(writer: GroupCommitWriter) -> GroupCommitWriter:
    """``writer`` once it saved a first item: the items after it, within its delay,
    find it busy and gather (a first item after a quiet spell goes at once)."""
    wait_all([writer.submit(Note())])
    return writer


def test_items_that_trickle_in_are_taken_together(counted: type[CountingInbox]) -> None:
    """If ten items come a few milliseconds apart while a batch gathers, then they are
    saved in one batch, and the writer's thread read its inbox with a wait once for it
    (not once per item) and once more for the next batch."""
    ledger = Batches()
    with writer_of(ledger, max_batch=100, max_delay=0.5) as writer:
        wait_all(trickle(warmed(writer), 10, 0.005))
        assert ledger.sizes == [1, 10]
        assert counted.blocking_reads <= 3


def test_a_flush_with_nothing_gathered_does_not_cut_the_next_batch_short() -> None:
    """If a flush comes with nothing queued, and items then come one by one before a
    second flush, then they are saved in one batch when the second flush comes."""
    ledger = Batches()
    with writer_of(ledger, max_batch=100, max_delay=30.0) as writer:
        warmed(writer).flush()
        time.sleep(0.05)
        futures = trickle(writer, 5, 0.01)
        writer.flush()
        wait_all(futures)
        assert ledger.sizes == [1, 5]


def test_a_full_inbox_is_saved_without_waiting_the_delay() -> None:
    """If more items are queued than a batch holds by a writer that is gathering (not
    after a quiet spell, whose first batch goes at once with what is there), then full
    batches are saved at once, one after the other, and the rest when a flush comes,
    long before the delay."""
    ledger = Batches()
    started = time.monotonic()
    with warmed(writer_of(ledger, max_batch=5, max_delay=30.0)) as writer:
        futures = [writer.submit(Note()) for _ in range(11)]
        wait_all(futures[:10])
        writer.flush()
        wait_all(futures[10:])
        assert sum(ledger.sizes) == 12  # the warm-up's item and these
        assert max(ledger.sizes) <= 5
    assert time.monotonic() - started < 10


def test_closing_ends_a_batch_being_gathered() -> None:
    """If the writer is closed while a batch waits out a long delay, then the batch is
    saved at once and the callers are answered."""
    ledger = Batches()
    writer = warmed(writer_of(ledger, max_batch=100, max_delay=30.0))
    futures = [writer.submit(Note()) for _ in range(3)]
    time.sleep(0.05)
    started = time.monotonic()
    writer.close()
    wait_all(futures)
    assert ledger.sizes == [1, 3]
    assert time.monotonic() - started < 5


def test_a_batch_fills_up_while_the_writer_holds_its_first_item() -> None:
    """If max_batch items come one by one (the writer holding the first while it waits
    for the rest), then the batch is saved as the last one arrives, not after the
    delay."""
    ledger = Batches()
    with writer_of(ledger, max_batch=5, max_delay=30.0) as writer:
        futures = trickle(warmed(writer), 5, 0.02)
        started = time.monotonic()
        wait_all(futures)
        assert time.monotonic() - started < 5
        assert ledger.sizes == [1, 5]


def test_an_item_after_a_quiet_spell_is_saved_without_the_delay() -> None:
    """If an item comes when the writer took no batch for longer than its delay (low
    load), then it is saved at once; items that follow within the delay gather."""
    ledger = Batches()
    with writer_of(ledger, max_batch=100, max_delay=0.2) as writer:
        started = time.monotonic()
        wait_all([writer.submit(Note())])
        assert time.monotonic() - started < 0.15
        time.sleep(0.3)  # quiet: longer than the delay
        started = time.monotonic()
        wait_all([writer.submit(Note())])
        assert time.monotonic() - started < 0.15
        wait_all(trickle(writer, 3, 0.01))  # within the delay of the last: they gather
        assert ledger.sizes == [1, 1, 3]
