"""The queue projection: keeps a queue backend equal to the fold of the log.

It reads execution and queue events page by page after its position, folds them into
queue changes and pause records, applies them (version-guarded, so a page applied
twice changes nothing) and then records the position. If the backend comes back empty
or with another epoch, the next step rebuilds: from the open-executions checkpoint when
there is one (cost grows with open executions), else by replaying the whole log.
"""

import contextlib
import functools
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import structlog

from jobledger.domain.clock import Clock, utc_now
from jobledger.infra.background import Background
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow, RowPage
from jobledger.projections.collector import collector_paused
from jobledger.projections.errors import QueueLostError
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import (
    CHECKPOINT_FOLLOWER,
    QUEUE_FOLLOWER,
    Isolation,
    Quarantine,
)
from jobledger.projections.queue.backend import (
    NamedLimit,
    QueueBackend,
    QueueChange,
    QueueItem,
    QueueMeta,
    QueuePause,
    QueueState,
)
from jobledger.projections.queue.checkpoint import Checkpoint
from jobledger.projections.queue.entries import EncodedEntry, decode_item, encode_entry
from jobledger.projections.queue.fold import (
    QUEUE_VIEWS,
    QueueFold,
    latest_per_execution,
    next_item,
    restored,
)
from jobledger.projections.queue.prefetch import prefetched
from jobledger.projections.queue.signal import WorkSignal, ready_queues
from jobledger.projections.times import to_ms

log = structlog.get_logger(__name__)

Progress = Callable[[int, int], None]  # (done, total)
# Events per page of a full replay: fewer, larger queries than the following pages.
REPLAY_PAGE = 10_000
# How long a follower waits for another process's rebuild to finish loading before it
# follows the queue as it is (the loader may have died; replaying from 0 repairs it):
# after the load's count (of batches and beats) last moved, or, for a loader that does
# not count, after the follower first saw it loading.
LOAD_SILENCE = 30.0
REBUILD_WAIT = 120.0
# A rebuild's loader counts a beat this often besides its batches, so a batch that takes
# longer than LOAD_SILENCE to read (a slow database, a large checkpoint page) is not
# taken for a dead loader.
LOAD_BEAT = 5.0
# A quiet step right after a page was applied skips its look for a lost queue (the
# apply looked at the epoch of every queue it wrote) unless the last look is this old.
QUIET_CHECK_EVERY = 1.0


def _no_progress(_done: int, _total: int) -> None:
    return None


@dataclass(frozen=True)
class RebuildReport:
    source: str  # "checkpoint" or "log"
    items: int
    position: int
    events: int
    quarantined: str = ""  # what the replay isolated, in one line ('' if nothing)


def previous_item(ledger: Ledger, execution_id: UUID, version: int) -> QueueItem | None:
    """The queue entry an execution had before ``version`` (None if it had none)."""
    item: QueueItem | None = None
    for domain_event in ledger.events.get(execution_id, lte=version - 1):
        item = next_item(domain_event, item)
    return item


def _row_pages(reader: LogReader, stop: int | None) -> Iterator[RowPage]:
    position = 0
    while True:
        page = reader.rows(position, stop, REPLAY_PAGE)
        if page.position == position:
            return
        yield page
        position = page.position


def replay(
    reader: LogReader, fold: QueueFold, isolation: Isolation, *, stop: int | None = None
) -> Iterator[tuple[int, int]]:
    """(position, events) per page, folding the log from its start to ``stop``.

    A thread reads the pages while this one decodes and folds: the database works on
    the next page meanwhile. The cyclic collector is paused meanwhile (see collector).
    An event that cannot be folded, and the rest of its stream, go to ``isolation``.
    """
    decode, step = reader.event, fold.fold

    def fold_row(row: LogRow) -> None:
        step((decode(row),))

    pages = prefetched(_row_pages(reader, stop), depth=2, name="log-read")
    with contextlib.closing(pages), collector_paused():
        for page in pages:
            isolation.each(page.rows, fold_row)
            yield page.position, len(page.rows)


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
        quarantine: Quarantine | None = None,
        counted: Callable[[str], None] | None = None,
        clock: Clock = utc_now,
        signal: WorkSignal | None = None,
    ) -> None:
        self.reader = LogReader(ledger, page_size, views=QUEUE_VIEWS)
        self.backend = backend
        self.signal = signal
        self._clock = clock
        self.store_id = store_id
        self.checkpoint = checkpoint
        self.fold = QueueFold(self._load_previous)
        self.epoch: str | None = None
        self.position = 0
        self.rebuilds = 0
        # Another process's load, awaited: its epoch and count when last seen to move.
        self._loading_since: float | None = None
        self._load_seen: tuple[str, int] | None = None
        self._building: str | None = None  # the epoch of this process's last rebuild
        self._rebuild_next = False  # a store left loading half way: start builds anew
        self._applied_since_check = False
        self._checked_at = -QUIET_CHECK_EVERY
        self.quarantine = quarantine
        self._counted = counted
        self.isolation = self.new_isolation()

    def new_isolation(self) -> Isolation:
        isolation = Isolation(QUEUE_FOLLOWER, self.quarantine)
        if self._counted is not None:
            isolation.counted = self._counted
        return isolation

    def step(self) -> bool:
        """Apply the next page; True if there was work (or a rebuild) to do. The queue
        steps again at once after any page: it lets no events gather (its readiness is
        what workers wait for), and its empty step is what looks for a lost queue."""
        epoch = self.epoch if self.epoch is not None else self.start()
        if epoch is None:
            return False  # another process's rebuild is still loading
        page = self.reader.rows(self.position)
        if page.position == self.position:
            return self._quiet_step(epoch)
        try:
            self.isolation.apply(page, self.position, functools.partial(self._apply, epoch=epoch))
        except QueueLostError:
            return self._lost_or_replaced(epoch, self.backend.read_meta())
        self.position = page.position
        self._applied_since_check = True
        return True

    def _quiet_step(self, epoch: str) -> bool:
        """During a drain every page is followed by a quiet step: the look for a lost
        queue (two to three Redis round trips) is left out of the one after a page,
        at most ``QUIET_CHECK_EVERY`` seconds since the last look."""
        now = time.monotonic()
        skip = self._applied_since_check and now - self._checked_at < QUIET_CHECK_EVERY
        self._applied_since_check = False
        if skip:
            return False
        self._checked_at = now
        return self._check_still_there(epoch)

    def _apply(self, rows: Sequence[LogRow], _start: int, position: int, *, epoch: str) -> bool:
        try:
            changes = latest_per_execution(self.fold.changes(self.reader.events(rows)))
            pauses, limits = self.fold.take_pauses(), self.fold.take_limits()
            if pauses or limits:
                self.backend.apply(changes, epoch=epoch)
                self.backend.apply_pauses(pauses, epoch=epoch)
                self.backend.apply_limits(limits, epoch=epoch)
                self.backend.write_position(position, epoch=epoch)
            else:
                # The usual page: its changes and its end together (ADR 72).
                self.backend.apply(changes, epoch=epoch, position=position)
        except Exception:
            # The fold may have moved past what was applied: ask the log again.
            self.fold.forget()
            raise
        self._ring(changes)
        return True

    def _ring(self, changes: Sequence[QueueChange]) -> None:
        """Wake the workers of the queues where runs became ready. A failed ring loses
        nothing (the workers' poll finds the runs): the page stays applied."""
        if self.signal is None:
            return
        queues = ready_queues(changes, self._clock())
        if not queues:
            return
        try:
            self.signal.ring(queues)
        except Exception as error:  # noqa: BLE001 (any failure: a ring is only a shortcut)
            log.warning("queue.ring_failed", queues=len(queues), error=str(error))

    def apply_one(self, row: LogRow) -> None:
        """Apply one event to the queue without moving the position (a retry of a
        quarantined event; the version guard keeps a later replay of it harmless)."""
        meta = self.backend.read_meta()
        if meta is None or meta.store_id != self.store_id:
            raise QueueLostError
        fold = QueueFold(self._load_previous)
        change = fold.change(self.reader.event(row))
        self.backend.apply([] if change is None else [change], epoch=meta.epoch)
        self.backend.apply_pauses(fold.take_pauses(), epoch=meta.epoch)
        self.backend.apply_limits(fold.take_limits(), epoch=meta.epoch)

    def _check_still_there(self, epoch: str) -> bool:
        """While the log is quiet, look for a loss anyway, so it is repaired before work
        arrives instead of when it does."""
        meta = self.backend.read_meta()
        if meta is not None and meta.epoch == epoch:
            return False
        return self._lost_or_replaced(epoch, meta)

    def _lost_or_replaced(self, epoch: str, meta: QueueMeta | None) -> bool:
        """Our epoch is gone: ``start`` resumes from the backend's meta, or rebuilds;
        returns whether to step again at once.

        Meta of this log under another epoch means another process rebuilt the queue
        (an operator asked for it): that is followed, not alerted on as a loss. While
        that process is still loading (``QueueMeta.loading``), applying events would race
        its unguarded load, so the follower waits for it while the load's count of batches
        moves (``LOAD_SILENCE``; ``REBUILD_WAIT`` for a loader that does not count)."""
        self.fold.forget()  # it folded a page that was not applied
        if meta is None:
            # On a cluster a reader may catch a reset half-read (its pipeline spans slots).
            meta = self.backend.read_meta()
        if meta is not None and meta.epoch == epoch and meta.loading:
            # Our own epoch failed a check while loading: a reset or a load stopped half
            # way (its store reads as loading, never as lost). Only a rebuild mends it.
            log.warning("queue.lost", position=self.position, epoch=epoch, loading=True)
            self._rebuild_next = True
        elif meta is None or meta.store_id != self.store_id:
            log.warning("queue.lost", position=self.position, epoch=epoch)
        elif self._still_loading(meta):
            return False
        else:
            log.info(
                "queue.rebuild_followed", epoch=meta.epoch, position=meta.position, previous=epoch
            )
        self.epoch = None
        return True

    def _still_loading(self, meta: QueueMeta) -> bool:
        # A rebuild of this process that failed half way waits for nobody.
        if not meta.loading or meta.epoch == self._building or self.reader.head() == 0:
            return False
        now, seen = time.monotonic(), (meta.epoch, meta.load_progress)
        if self._load_seen is None or self._load_seen[0] != meta.epoch:
            log.info("queue.rebuild_awaited", epoch=meta.epoch)
        if seen != self._load_seen or self._loading_since is None:
            self._load_seen, self._loading_since = seen, now
        silence = LOAD_SILENCE if meta.load_progress > 0 else REBUILD_WAIT
        return now - self._loading_since < silence

    def start(self) -> str | None:
        """Resume from the backend's meta, or rebuild if it has none for this log; None
        while another process's rebuild is still loading (see ``_lost_or_replaced``)."""
        meta = self.backend.read_meta()
        if self._rebuild_next or meta is None or meta.store_id != self.store_id:
            self._rebuild_next = False
            self.rebuild()
        elif meta.position > self.reader.head():
            # The queue has seen events the log no longer holds: the database was
            # restored from a backup. What it holds is of a lost future; start over.
            log.warning("queue.ahead_of_log", position=meta.position, head=self.reader.head())
            self.rebuild()
        elif self._still_loading(meta):
            return None
        else:
            self.epoch, self.position = meta.epoch, meta.position
            self.fold.forget()
        self._loading_since = self._load_seen = None
        return str(self.epoch)

    def rebuild(
        self,
        *,
        full: bool = False,
        progress: Progress = _no_progress,
        requested_by: str | None = None,
        now: datetime | None = None,
    ) -> RebuildReport:
        """Start the backend over: from the checkpoint, or (``full``) from the whole log.
        ``requested_by`` names who asked (an operator); None when the projection
        rebuilds by itself because the backend lost its data. The leases it restores
        run for at least one lease ttl from ``now`` (see ``restored``)."""
        self.rebuilds += 1
        self.fold.forget()
        epoch = self._building = uuid.uuid4().hex
        now = self._clock() if now is None else now
        # A checkpoint still at 0 has folded nothing of a log that may hold events:
        # such a rebuild reads the log.
        with _LoadBeat(self.backend, epoch):
            if self.checkpoint is not None and not full and self.checkpoint.position() > 0:
                report = self._rebuild_from_checkpoint(self.checkpoint, epoch, progress, now)
            else:
                report = self._rebuild_from_log(epoch, progress, self.new_isolation(), now)
        self.epoch, self.position = epoch, report.position
        log.info(
            "queue.rebuilt",
            requested_by=requested_by,
            source=report.source,
            items=report.items,
            position=report.position,
            events=report.events,
        )
        return report

    def _rebuild_from_checkpoint(
        self, checkpoint: Checkpoint, epoch: str, progress: Progress, now: datetime
    ) -> RebuildReport:
        # A thread reads the checkpoint while this one writes the backend.
        batches = prefetched(checkpoint.entries(), name="checkpoint-read")
        try:
            # The first batch always comes, empty or not, with the snapshot's position.
            first = next(batches)
            position = first[0]
            self.backend.reset(self._loading_meta(epoch))
            # Before the entries, so no worker leases from a paused queue meanwhile, nor
            # past a named limit.
            self.backend.apply_pauses(checkpoint.pauses(), epoch=epoch)
            self.backend.apply_limits(checkpoint.limits(), epoch=epoch)
            read = itertools.chain([first], batches)
            restoring = ((at, _restored_entries(batch, now)) for at, batch in read)
            items = self._load_entries(restoring, epoch, progress)
        finally:
            batches.close()
        # Read again after the entries: a pause committed since the first read is at or
        # past ``position``, which the follower replays from (version-guarded).
        self.backend.apply_pauses(checkpoint.pauses(), epoch=epoch)
        self.backend.apply_limits(checkpoint.limits(), epoch=epoch)
        self.backend.write_position(position, epoch=epoch)
        if self.quarantine is not None:
            # The checkpoint left out what it holds; so does the queue built from it.
            self.quarantine.inherit(QUEUE_FOLLOWER, CHECKPOINT_FOLLOWER, up_to=position)
        return RebuildReport("checkpoint", items, position, 0)

    def _loading_meta(self, epoch: str) -> QueueMeta:
        """The meta a rebuild's reset writes: loading, its batches counted from 1."""
        return QueueMeta(
            store_id=self.store_id, epoch=epoch, position=0, loading=True, load_progress=1
        )

    def _load_entries(
        self, batches: Iterable[tuple[int, list[EncodedEntry]]], epoch: str, progress: Progress
    ) -> int:
        def counted() -> Iterator[list[EncodedEntry]]:
            done = 0
            for _position, batch in batches:
                if not batch:
                    continue
                yield batch
                done += len(batch)
                progress(done, done)

        # Redis stores the very bytes the checkpoint holds: no item is built there.
        return self.backend.load_entries(counted(), epoch=epoch)

    def _rebuild_from_log(
        self, epoch: str, progress: Progress, isolation: Isolation, now: datetime
    ) -> RebuildReport:
        # Fold the whole log in memory first, then write only what is still open.
        head = self.reader.head()
        position = events = 0
        for position, count in replay(self.reader, self.fold, isolation):
            events += count
            progress(position, max(head, position))
        self.backend.reset(self._loading_meta(epoch))
        self.backend.apply_pauses(self.fold.pauses(), epoch=epoch)
        self.backend.apply_limits(self.fold.named_limits(), epoch=epoch)
        open_items = [restored(item, now) for item in self.fold.open_items()]
        self.backend.load(open_items, epoch=epoch)
        self.backend.write_position(position, epoch=epoch)
        return RebuildReport("log", len(open_items), position, events, isolation.summary())

    def _load_previous(self, execution_id: UUID, version: int) -> QueueItem | None:
        if self.checkpoint is not None:
            item = self.checkpoint.load(execution_id)
            if item is not None and item.version == version - 1:
                return item
        return previous_item(self.reader.ledger, execution_id, version)


class _LoadBeat(Background):
    """Counts a beat of a rebuild's load every ``LOAD_BEAT`` seconds while the rebuild
    runs (the store counts it only while it is loading under the rebuild's epoch). It
    lives in the loader's process: once that dies, the beats stop with its batches."""

    def __init__(self, backend: QueueBackend, epoch: str) -> None:
        super().__init__("queue-load-beat")
        self._backend, self._epoch = backend, epoch

    def __enter__(self) -> None:
        self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.wait(LOAD_BEAT):
            try:
                self._backend.stamp_load(epoch=self._epoch)
            except Exception:  # noqa: BLE001 (an unreachable store fails the load itself)
                log.debug("queue.load_beat_missed", epoch=self._epoch)


def _restored_entries(batch: list[EncodedEntry], now: datetime) -> list[EncodedEntry]:
    """``restored`` for encoded entries: only leases (few) are decoded and re-encoded."""
    return [
        encode_entry(restored(decode_item(entry[7]), now))
        if entry[3] == QueueState.LEASED.value
        else entry
        for entry in batch
    ]


class CheckpointProjection:
    """Follows the log into the open-executions checkpoint (exactly once: rows and
    position commit together)."""

    def __init__(
        self,
        ledger: Ledger,
        checkpoint: Checkpoint,
        *,
        page_size: int = 2000,
        isolation: Isolation | None = None,
    ) -> None:
        self.reader = LogReader(ledger, page_size, views=QUEUE_VIEWS)
        self.checkpoint = checkpoint
        self.fold = QueueFold(self._load_previous)
        self.position: int | None = None
        self.isolation = isolation or Isolation(CHECKPOINT_FOLLOWER)

    def step(self) -> bool:
        if self.position is None:
            self.position = self.checkpoint.position()
            self.fold.forget()
        page = self.reader.rows(self.position)
        if page.position == self.position:
            return False
        self.isolation.apply(page, self.position, self._apply)
        self.position = page.position
        return page.full(self.reader.page_size)

    def _apply(self, rows: Sequence[LogRow], _start: int, position: int) -> bool:
        """Rows and position in one transaction (each row alone, when isolating)."""
        try:
            changes = latest_per_execution(self.fold.changes(self.reader.events(rows)))
            self.checkpoint.commit(
                changes,
                position,
                pauses=self.fold.take_pauses(),
                limits=self.fold.take_limits(),
            )
        except Exception:
            self.fold.forget()  # it may have moved past what was committed
            raise
        return True

    def apply_one(self, row: LogRow) -> None:
        """Apply one event without moving the position (a retry)."""
        fold = QueueFold(self._load_previous)
        change = fold.change(self.reader.event(row))
        self.checkpoint.commit(
            [] if change is None else [change],
            None,
            pauses=fold.take_pauses(),
            limits=fold.take_limits(),
        )

    def _load_previous(self, execution_id: UUID, version: int) -> QueueItem | None:
        item = self.checkpoint.load(execution_id)
        if item is not None and item.version == version - 1:
            return item
        return previous_item(self.reader.ledger, execution_id, version)


def expected_queue(
    reader: LogReader, *, stop: int, isolation: Isolation, into: QueueBackend
) -> QueueBackend:
    """The queue as the log says it is at ``stop``: a fresh fold into ``into`` (an empty
    queue in memory), without the streams ``isolation`` holds (as the projection leaves
    them out)."""
    memory = into
    memory.reset(QueueMeta(store_id="verify", epoch="verify", position=0))
    fold = QueueFold(functools.partial(previous_item, reader.ledger))
    for _page in replay(reader, fold, isolation, stop=stop):
        pass  # the fold remembers every open entry
    memory.load(fold.open_items(), epoch="verify")
    memory.apply_pauses(fold.pauses(), epoch="verify")
    memory.apply_limits(fold.named_limits(), epoch="verify")
    return memory


def verify_queue(
    reader: LogReader,
    backend: QueueBackend,
    isolation: Isolation | None = None,
    *,
    scratch: QueueBackend,
) -> list[str]:
    """Every difference between ``backend`` and the fold of the log at its position,
    folded into ``scratch`` (an empty queue in memory).

    The events the fold cannot apply are left in ``isolation`` (not recorded: a
    verify changes nothing); the caller reports them.
    """
    meta = backend.read_meta()
    if meta is None:
        return ["the queue is empty: no position recorded (it was never built, or it was lost)"]
    isolation = isolation or Isolation(QUEUE_FOLLOWER, persist=False)
    expected = expected_queue(reader, stop=meta.position, isolation=isolation, into=scratch)
    differences = _diff_pauses(expected.pauses(), backend.pauses())
    differences += _diff_limits(expected.named_limits(), backend.named_limits())
    for queue in sorted(expected.queues() | backend.queues()):
        differences += _diff_queue(queue, expected.items(queue), backend.items(queue))
    return differences


def _diff_pauses(expected: dict[str, QueuePause], actual: dict[str, QueuePause]) -> list[str]:
    """A queue paused on one side and not on the other, or paused by another operator
    or for another reason (a queue never paused and one resumed are both running)."""
    differences = []
    for queue in sorted(expected.keys() | actual.keys()):
        want, have = expected.get(queue), actual.get(queue)
        if _shown(want) != _shown(have):
            differences.append(f"{queue}: paused is {_shown(have)}, the log says {_shown(want)}")
    return differences


def _diff_limits(expected: dict[str, NamedLimit], actual: dict[str, NamedLimit]) -> list[str]:
    """A named limit missing on one side, or with other values."""
    return [
        f"limit {name}: the queue has {actual.get(name)}, the log says {expected.get(name)}"
        for name in sorted(expected.keys() | actual.keys())
        if expected.get(name) != actual.get(name)
    ]


def _shown(pause: QueuePause | None) -> str:
    if pause is None or not pause.paused:
        return "no"
    return f"yes (by {pause.by}: {pause.reason})"


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
