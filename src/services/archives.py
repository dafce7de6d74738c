"""Retention (ADR 45): the history of closed executions moves from the log to archive
files, and audits read it back from there.

One run scans the first events of executions up to the low-water mark, keeps those
closed before their queue's cut-off, and archives them a batch at a time: write the
files, read them back and verify them, then remove the events and record
``HistoryArchived`` in one transaction. The CLI (`jobledger archive`), the
``system.archive`` handler and the history routes all come here.
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import structlog
from eventsourcing.persistence import StoredEvent

from jobledger.domain.archive import ArchiveRecord, History, Retention, history_id
from jobledger.domain.roles import Role
from jobledger.infra.settings import Settings
from jobledger.persistence.archive_files import (
    ArchivedEvent,
    ArchiveFileError,
    Manifest,
    archive_names,
    archive_of,
    data_path,
    events_digest,
    file_sha256,
    make_private_folder,
    manifest_path,
    read_events,
    read_manifest,
    unfinished_files,
    verified,
    write_data,
    write_manifest,
)
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.undecodable import decode_or_placeholder
from jobledger.projections.log.archive_store import (
    ArchiveStore,
    ArchiveStoreError,
    ClosedStream,
    Mark,
    Removal,
)
from jobledger.services.actors import Actor
from jobledger.services.errors import AlreadyRunningError, ServiceError
from jobledger.services.history import EventOut, event_out

log = structlog.get_logger(__name__)

Progress = Callable[[int, int], None]  # (log position scanned, low-water mark)
# First events per page of the scan.
_SCAN_PAGE = 2000
# Event times come from each writer's clock: scan a little past the latest cut-off.
_CLOCK_MARGIN = timedelta(hours=1)


def _no_progress(_done: int, _total: int) -> None:
    """Progress nobody watches."""


class ArchiveNotVerifiedError(ServiceError):
    """An archive did not read back as written: nothing was removed from the log."""


class ArchiveNotRestorableError(ServiceError):
    """An archive's events cannot go back into the log as they were."""


class ArchiveUnreadableError(ServiceError):
    """An archive file is missing, damaged, or not what its manifest says."""


@dataclass(frozen=True)
class ArchivedBatch:
    """One archive written, verified and removed from the log."""

    name: str
    executions: int
    events: int
    first_position: int
    last_position: int


@dataclass
class ArchiveReport:
    """What a run archived (or, with ``dry_run``, would archive)."""

    dry_run: bool
    cutoff: datetime  # the latest of the queues' cut-offs
    mark: Mark
    location: str
    held: bool = False  # a ``before`` later than the retention was held to it
    batches: list[ArchivedBatch] = field(default_factory=list)
    executions: int = 0
    events: int = 0
    orphans_removed: int = 0

    def summary(self) -> dict[str, Any]:
        """Plain values for a handler's result and the log."""
        return {
            "dry_run": self.dry_run,
            "cutoff": self.cutoff.isoformat(),
            "held_to_retention": self.held,
            "low_water_mark": self.mark.position,
            "held_back_by": self.mark.follower,
            "archives": [b.name for b in self.batches],
            "executions": self.executions,
            "events": self.events,
            "location": self.location,
        }


@dataclass(frozen=True)
class _Run:
    """One run's fixed inputs."""

    retention: Retention
    at: datetime
    by: Actor
    folder: Path


class Archives:
    def __init__(
        self,
        ledger: Ledger,
        store: ArchiveStore,
        settings: Settings,
        queue_position: Callable[[], int | None],
        lock: Callable[[], AbstractContextManager[bool]],
    ) -> None:
        self._ledger = ledger
        self._store = store
        self._settings = settings
        self._queue_position = queue_position
        # Held by one archive run at a time (True), or by another already (False).
        self._lock = lock

    def retention(
        self, before: datetime | None = None, *, forced_because: str | None = None
    ) -> Retention:
        settings = self._settings
        return Retention(
            settings.retention_days,
            settings.queue_retention_days,
            before=before,
            forced_because=forced_because,
        )

    # ---- archiving ----------------------------------------------------------------------

    def archive(
        self,
        *,
        at: datetime,
        by: Actor,
        before: datetime | None = None,
        forced_because: str | None = None,
        dry_run: bool = False,
        progress: Progress = _no_progress,
    ) -> ArchiveReport:
        """Archive the history of executions closed before the retention's cut-off, or
        before ``before`` where that is earlier; ``dry_run`` only counts. Only an admin's
        ``forced_because`` (their reason, recorded) lets ``before`` go past the retention."""
        by.require(Role.ADMIN)
        retention = self.retention(before, forced_because=forced_because)
        run = _Run(retention, at, by, self._settings.archive_path)
        with self._lock() as locked:
            if not locked:
                raise AlreadyRunningError(
                    "another archive run holds the lock", fix="wait for it to finish"
                )
            return self._archive(run, dry_run=dry_run, progress=progress)

    def scheduled(self, *, at: datetime, before: datetime | None) -> dict[str, Any]:
        """``archive`` as the ``system.archive`` handler runs it."""
        by = Actor("system.archive", Role.ADMIN)
        return self.archive(at=at, by=by, before=before).summary()

    def _archive(self, run: _Run, *, dry_run: bool, progress: Progress) -> ArchiveReport:
        mark = self._store.low_water_mark(self._queue_position())
        cutoff = run.retention.latest_cutoff(at=run.at)
        report = ArchiveReport(
            dry_run, cutoff, mark, str(run.folder), run.retention.held(at=run.at)
        )
        if run.retention.forced_because is not None:
            log.warning(
                "archive.forced", cutoff=cutoff.isoformat(), by=run.by.name, dry_run=dry_run
            )
        if not dry_run:
            make_private_folder(run.folder)
            report.orphans_removed = self._remove_orphans(run.folder)
        log.info("archive.started", cutoff=report.cutoff.isoformat(), low_water_mark=mark.position)
        for streams in self._due(run, mark, progress):
            if dry_run:
                report.executions += len(streams)
                report.events += sum(len(s.events) for s in streams)
                continue
            batch = self._archive_batch(run, streams)
            report.batches.append(batch)
            report.executions += batch.executions
            report.events += batch.events
        log.info("archive.finished", **report.summary())
        return report

    def _due(self, run: _Run, mark: Mark, progress: Progress) -> Iterator[list[ClosedStream]]:
        """Closed streams due for archiving, in batches, oldest first."""
        horizon = run.retention.latest_cutoff(at=run.at) + _CLOCK_MARGIN
        size, pending, position = self._settings.archive_batch, [], 0
        while position < mark.position:
            page = self._store.first_events(position, mark.position, _SCAN_PAGE)
            # An event that no longer decodes (None) keeps its execution in the log.
            created = [(r, self._store.created_at(r)) for r in page.rows]
            rows = [r for r, at in created if at is not None and at < horizon]
            past = any(at is not None and at >= horizon for _, at in created)
            for stream in self._store.closed(rows, mark.position):
                if stream.closed_at < run.retention.cutoff(stream.queue, at=run.at):
                    pending.append(stream)
                if len(pending) >= size:
                    yield pending
                    pending = []
            position = mark.position if past else page.position
            progress(position, mark.position)
        if pending:
            yield pending

    def _archive_batch(self, run: _Run, streams: Sequence[ClosedStream]) -> ArchivedBatch:
        events = sorted((e for s in streams for e in s.events), key=lambda e: e.position)
        digest = events_digest(events)
        first, last = events[0].position, events[-1].position
        # The run's time in the name: an archive restored and archived again is another.
        name = f"history-{first:012d}-{last:012d}-{run.at.astimezone(UTC):%Y%m%dT%H%M%S}"
        sha256 = write_data(run.folder, name, events)
        manifest = Manifest(
            name=name,
            created_at=run.at,
            cutoff=run.retention.latest_cutoff(at=run.at),
            first_position=first,
            last_position=last,
            executions=len(streams),
            events=len(events),
            sha256=sha256,
            events_sha256=digest,
            execution_ids=[s.execution_id for s in streams],
        )
        manifest_sha256 = write_manifest(run.folder, manifest)
        _verify(run.folder, name, manifest)
        record = self._record(run, manifest, manifest_sha256)
        removal = Removal(
            name, str(run.folder), streams, digest, record, sha256, manifest_sha256, run.at
        )
        try:
            self._store.remove(removal)
        except ArchiveStoreError as error:
            raise ArchiveNotVerifiedError(str(error), fix="run the archive again") from None
        log.info("archive.removed", archive=name, executions=len(streams), events=len(events))
        return ArchivedBatch(name, len(streams), len(events), first, last)

    def _record(self, run: _Run, manifest: Manifest, manifest_sha256: str) -> StoredEvent:
        record = ArchiveRecord(
            name=manifest.name,
            location=str(run.folder),
            positions=(manifest.first_position, manifest.last_position),
            counts=(manifest.executions, manifest.events),
            cutoff=manifest.cutoff,
            sums=(manifest.sha256, manifest_sha256),
            by=run.by.name,
            forced_because=run.retention.forced_because,
        )
        (archived,) = History.archived(record).collect_events()
        return self._ledger.mapper.to_stored_event(archived)

    def _remove_orphans(self, folder: Path) -> int:
        """Remove the files of archives whose removal never committed (a run that was
        stopped half-way); their events are still in the log."""
        recorded = self._store.recorded()
        orphans = [p for p in unfinished_files(folder) if archive_of(p) not in recorded]
        for path in orphans:
            path.unlink(missing_ok=True)
            log.warning("archive.orphan_removed", file=path.name)
        return len(orphans)

    # ---- restoring ----------------------------------------------------------------------

    def restore(self, path: Path, *, by: Actor) -> list[ArchivedBatch]:
        """Put the events of the archives at ``path`` (a file of one, or a folder) back
        into the log at their old positions, each archive verified first and recorded as
        ``HistoryRestored``. The read models show them again after a rebuild."""
        by.require(Role.ADMIN)
        with self._lock() as locked:
            if not locked:
                raise AlreadyRunningError(
                    "an archive run holds the lock", fix="wait for it to finish"
                )
            return [self._restore(folder, name, by) for folder, name in _archives_at(path)]

    def _restore(self, folder: Path, name: str, by: Actor) -> ArchivedBatch:
        with _unreadable():
            manifest = verified(folder, name)
            events = list(read_events(data_path(folder, name)))
        history = self._ledger.get_history(history_id(name))
        history.restore(by=by.name)
        (restored,) = history.collect_events()
        try:
            self._store.restore(name, events, self._ledger.mapper.to_stored_event(restored))
        except ArchiveStoreError as error:
            raise ArchiveNotRestorableError(
                str(error), fix="archive or remove those executions' new events first"
            ) from None
        log.info("archive.restored", archive=name, events=len(events), by=by.name)
        return ArchivedBatch(
            name,
            manifest.executions,
            manifest.events,
            manifest.first_position,
            manifest.last_position,
        )

    # ---- reading ------------------------------------------------------------------------

    def history(self, execution_id: UUID) -> list[EventOut] | None:
        """The events of an archived execution, marked archived; None if it was not."""
        found = self._store.archive_of(execution_id)
        if found is None:
            return None
        name, location = found
        path = data_path(Path(location), name)
        _check_sum(path, read_manifest(manifest_path(Path(location), name)))
        return [self._shown(e) for e in read_events(path) if e.originator_id == execution_id]

    def archived_ids(self, execution_ids: Sequence[UUID]) -> set[UUID]:
        """Those of ``execution_ids`` whose history was archived."""
        return self._store.archived_ids(execution_ids) if execution_ids else set()

    def audit(self, path: Path, execution_id: UUID | None = None) -> Iterator[EventOut]:
        """Every event of the archives at ``path`` (a file of one, or a folder), each
        archive verified against its manifest first; only ``execution_id``'s if given."""
        for folder, name in _archives_at(path):
            with _unreadable():
                verified(folder, name)
                for event in read_events(data_path(folder, name)):
                    if execution_id is None or event.originator_id == execution_id:
                        yield self._shown(event)

    def _shown(self, event: ArchivedEvent) -> EventOut:
        stored = StoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=event.topic,
            state=event.state,
        )
        shown = decode_or_placeholder(self._ledger.mapper, stored, event.position)
        return msgspec.structs.replace(event_out(shown, position=event.position), archived=True)


def _verify(folder: Path, name: str, written: Manifest) -> None:
    with _unreadable(ArchiveNotVerifiedError):
        if verified(folder, name) != written:
            msg = f"{name}: the manifest read back is not the one written"
            raise ArchiveFileError(msg)


def _check_sum(path: Path, manifest: Manifest) -> None:
    with _unreadable():
        if file_sha256(path) != manifest.sha256:
            msg = f"{path}: its sha256 is not the manifest's; the file is damaged or was changed"
            raise ArchiveFileError(msg)


def _archives_at(path: Path) -> list[tuple[Path, str]]:
    if path.is_dir():
        names = archive_names(path)
        if not names:
            raise ArchiveUnreadableError(
                f"{path}: no archive manifest (*.manifest.json) in this folder",
                fix="give the archive folder (JOBLEDGER_ARCHIVE_DIR) or one archive's file",
            )
        return [(path, name) for name in names]
    if not path.exists():
        raise ArchiveUnreadableError(
            f"{path}: no such file or folder", fix="give an archive's .jsonl.gz or its folder"
        )
    return [(path.parent, archive_of(path))]


@contextlib.contextmanager
def _unreadable(kind: type[ServiceError] = ArchiveUnreadableError) -> Iterator[None]:
    try:
        yield
    except (ArchiveFileError, OSError) as error:
        raise kind(str(error), fix="restore the archive's files from a backup") from None
