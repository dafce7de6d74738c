"""The queue projection: keeps a queue backend equal to the fold of the log.

It reads execution events page by page after its position, folds them into queue
changes, applies them (version-guarded, so a page applied twice changes nothing) and
then records the position. If the backend comes back empty or with another epoch, the
next step rebuilds: from the open-executions checkpoint when there is one (cost grows
with open executions), else by replaying the whole log.
"""

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog

from jobledger.domain.ledger import Ledger
from jobledger.projections.checkpoint import Checkpoint, to_ms
from jobledger.projections.errors import QueueLostError
from jobledger.projections.log import read_page
from jobledger.projections.memory_queue import MemoryQueue
from jobledger.projections.queue import QueueBackend, QueueChange, QueueItem, QueueMeta, QueueState
from jobledger.projections.queue_fold import (
    EXECUTION_TOPICS,
    QueueFold,
    latest_per_execution,
    next_item,
)

log = structlog.get_logger(__name__)

Progress = Callable[[int, int], None]  # (done, total)
_TOPICS = tuple(sorted(EXECUTION_TOPICS))
LOAD_BATCH = 10_000


def _no_progress(_done: int, _total: int) -> None:
    return None


@dataclass(frozen=True)
class RebuildReport:
    source: str  # "checkpoint" or "log"
    items: int
    position: int
    events: int


class LogReader:
    """Execution events of the ledger's log, and the history of one execution."""

    def __init__(self, ledger: Ledger, page_size: int = 2000) -> None:
        self.ledger = ledger
        self.page_size = page_size

    def head(self) -> int:
        return self.ledger.recorder.max_notification_id() or 0

    def page(self, after: int, stop: int | None = None) -> tuple[list[Any], int]:
        page = read_page(
            self.ledger.recorder, after, limit=self.page_size, topics=_TOPICS, stop=stop
        )
        to_event = self.ledger.mapper.to_domain_event
        return [to_event(n) for n in page.notifications], page.position

    def previous(self, execution_id: UUID, version: int) -> QueueItem | None:
        item: QueueItem | None = None
        for domain_event in self.ledger.events.get(execution_id, lte=version - 1):
            item = next_item(domain_event, item)
        return item


def replay(
    reader: LogReader, fold: QueueFold, *, stop: int | None = None
) -> Iterator[tuple[list[QueueChange], int, int]]:
    """(changes, position, events) per page, from the start of the log to ``stop``."""
    position = 0
    while True:
        events, new_position = reader.page(position, stop)
        if new_position == position:
            return
        yield list(fold.changes(events)), new_position, len(events)
        position = new_position


class QueueProjection:
    """Follows the log into a queue backend; ``step`` is one unit of work."""

    def __init__(
        self,
        ledger: Ledger,
        backend: QueueBackend,
        *,
        store_id: str,
        checkpoint: Checkpoint | None = None,
        page_size: int = 2000,
    ) -> None:
        self.reader = LogReader(ledger, page_size)
        self.backend = backend
        self.store_id = store_id
        self.checkpoint = checkpoint
        self.fold = QueueFold(self._load_previous)
        self.epoch: str | None = None
        self.position = 0
        self.rebuilds = 0

    def step(self) -> bool:
        """Apply the next page; True if there was work (or a rebuild) to do."""
        epoch = self.epoch if self.epoch is not None else self.start()
        events, position = self.reader.page(self.position)
        if position == self.position:
            return self._check_still_there(epoch)
        changes = latest_per_execution(self.fold.changes(events))
        try:
            self.backend.apply(changes, epoch=epoch)
            self.backend.write_position(position, epoch=epoch)
        except QueueLostError:
            log.warning("queue.lost", position=self.position, epoch=self.epoch)
            self.epoch = None
            return True
        self.position = position
        return True

    def _check_still_there(self, epoch: str) -> bool:
        """While the log is quiet, look for a loss anyway, so it is repaired before work
        arrives instead of when it does."""
        meta = self.backend.read_meta()
        if meta is not None and meta.epoch == epoch:
            return False
        log.warning("queue.lost", position=self.position, epoch=epoch)
        self.epoch = None
        return True

    def start(self) -> str:
        """Resume from the backend's meta, or rebuild if it has none for this log."""
        meta = self.backend.read_meta()
        if meta is None or meta.store_id != self.store_id:
            self.rebuild()
        else:
            self.epoch, self.position = meta.epoch, meta.position
            self.fold.forget()
        return str(self.epoch)

    def rebuild(self, *, full: bool = False, progress: Progress = _no_progress) -> RebuildReport:
        """Start the backend over: from the checkpoint, or (``full``) from the whole log."""
        self.rebuilds += 1
        self.fold.forget()
        epoch = uuid.uuid4().hex
        if self.checkpoint is not None and not full:
            report = self._rebuild_from_checkpoint(self.checkpoint, epoch, progress)
        else:
            report = self._rebuild_from_log(epoch, progress)
        self.epoch, self.position = epoch, report.position
        log.info(
            "queue.rebuilt",
            source=report.source,
            items=report.items,
            position=report.position,
            events=report.events,
        )
        return report

    def _rebuild_from_checkpoint(
        self, checkpoint: Checkpoint, epoch: str, progress: Progress
    ) -> RebuildReport:
        started = False
        items = 0
        position = 0
        for snapshot_position, batch in checkpoint.snapshot():
            position = snapshot_position
            if not started:
                self.backend.reset(QueueMeta(store_id=self.store_id, epoch=epoch, position=0))
                started = True
            self.backend.load(batch, epoch=epoch)
            items += len(batch)
            progress(items, items)
        if not started:
            position = checkpoint.position()
            self.backend.reset(QueueMeta(store_id=self.store_id, epoch=epoch, position=0))
        self.backend.write_position(position, epoch=epoch)
        return RebuildReport("checkpoint", items, position, 0)

    def _rebuild_from_log(self, epoch: str, progress: Progress) -> RebuildReport:
        # Fold the whole log in memory first, then write only what is still open.
        head = self.reader.head()
        position = events = 0
        for _changes, position, count in replay(self.reader, self.fold):
            events += count
            progress(position, max(head, position))
        self.backend.reset(QueueMeta(store_id=self.store_id, epoch=epoch, position=0))
        open_items = self.fold.open_items()
        for start in range(0, len(open_items), LOAD_BATCH):
            self.backend.load(open_items[start : start + LOAD_BATCH], epoch=epoch)
        self.backend.write_position(position, epoch=epoch)
        return RebuildReport("log", len(open_items), position, events)

    def _load_previous(self, execution_id: UUID, version: int) -> QueueItem | None:
        if self.checkpoint is not None:
            item = self.checkpoint.load(execution_id)
            if item is not None and item.version == version - 1:
                return item
        return self.reader.previous(execution_id, version)


class CheckpointProjection:
    """Follows the log into the open-executions checkpoint (exactly once: rows and
    position commit together)."""

    def __init__(self, ledger: Ledger, checkpoint: Checkpoint, *, page_size: int = 2000) -> None:
        self.reader = LogReader(ledger, page_size)
        self.checkpoint = checkpoint
        self.fold = QueueFold(self._load_previous)
        self.position: int | None = None

    def step(self) -> bool:
        if self.position is None:
            self.position = self.checkpoint.position()
            self.fold.forget()
        events, position = self.reader.page(self.position)
        if position == self.position:
            return False
        self.checkpoint.commit(latest_per_execution(self.fold.changes(events)), position)
        self.position = position
        return True

    def _load_previous(self, execution_id: UUID, version: int) -> QueueItem | None:
        item = self.checkpoint.load(execution_id)
        if item is not None and item.version == version - 1:
            return item
        return self.reader.previous(execution_id, version)


def expected_queue(reader: LogReader, *, stop: int) -> MemoryQueue:
    """The queue as the log says it is at ``stop``: a fresh fold into memory."""
    memory = MemoryQueue()
    memory.reset(QueueMeta(store_id="verify", epoch="verify", position=0))
    fold = QueueFold(reader.previous)
    for _page in replay(reader, fold, stop=stop):
        pass  # the fold remembers every open entry
    memory.load(fold.open_items(), epoch="verify")
    return memory


def verify_queue(reader: LogReader, backend: QueueBackend) -> list[str]:
    """Every difference between ``backend`` and the fold of the log at its position."""
    meta = backend.read_meta()
    if meta is None:
        return ["the queue is empty: no position recorded (it was never built, or it was lost)"]
    expected = expected_queue(reader, stop=meta.position)
    differences: list[str] = []
    for queue in sorted(expected.queues() | backend.queues()):
        differences += _diff_queue(queue, expected.items(queue), backend.items(queue))
    return differences


def _diff_queue(queue: str, expected: list[QueueItem], actual: list[QueueItem]) -> list[str]:
    want = {item.execution_id: item for item in expected}
    have = {item.execution_id: item for item in actual}
    differences = [
        f"{queue}: missing {i} ({want[i].state})" for i in sorted(want.keys() - have.keys())
    ]
    differences += [
        f"{queue}: unexpected {i} ({have[i].state})" for i in sorted(have.keys() - want.keys())
    ]
    for execution_id in sorted(want.keys() & have.keys()):
        fields = _differing_fields(want[execution_id], have[execution_id])
        if fields:
            differences.append(f"{queue}: {execution_id} differs in {', '.join(fields)}")
    return differences


def _differing_fields(want: QueueItem, have: QueueItem) -> list[str]:
    names = ["priority", "version", "state", "attempt", "lease_id", "spec"]
    fields = [name for name in names if getattr(want, name) != getattr(have, name)]
    # A lease deadline moves with heartbeats, which are not events: only the rest counts.
    if want.state is not QueueState.LEASED and to_ms(want.at) != to_ms(have.at):
        fields.append("at")
    return fields
