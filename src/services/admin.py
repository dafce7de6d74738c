"""Admin operations on the projections: rebuild and verify the queue (also in the
background, with progress), rebuild the read models, and the quarantined events."""

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

import structlog

from jobledger.domain.clock import Clock
from jobledger.domain.roles import Role
from jobledger.projections.errors import QueueLostError
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import (
    QUEUE_FOLLOWER,
    ApplyOne,
    Quarantine,
    QuarantinedEvent,
    ReadRow,
    RetryReport,
    RetryStoppedError,
    Unapplied,
    event_type,
    isolation_of,
    retry,
    unapplied,
)
from jobledger.projections.queue.backend import QueueBackend
from jobledger.projections.queue.projection import QueueProjection, RebuildReport, verify_queue
from jobledger.projections.read_models.follower import ReadModels
from jobledger.services.actors import Actor
from jobledger.services.errors import AlreadyRunningError, StoresUnavailableError

__all__ = [
    "Admin",
    "QuarantinedEvent",
    "RebuildReport",
    "RetryReport",
    "TaskStatus",
    "Unapplied",
    "event_type",
]

log = structlog.get_logger(__name__)

Progress = Callable[[int, int], None]


def _no_progress(_done: int, _total: int) -> None:
    """Progress nobody watches."""


@dataclass
class TaskStatus:
    """A long admin operation (a queue rebuild) that the dashboard polls."""

    name: str
    state: str = "idle"  # idle | running | done | failed
    done: int = 0
    total: int = 0
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class ReadModelRebuild:
    events: int
    isolated: str  # what the replay isolated, in one line ('' if nothing)


@dataclass(frozen=True)
class Followers:
    """What the admin operations act on, handed over by the composition root: the queue
    and its projection, the read models, the quarantine, and each follower's way of
    applying one event (the roles own the followers, so the root builds them)."""

    queue: QueueBackend
    quarantine: Quarantine
    reader: Callable[[], LogReader]
    # A projection of the queue over connections of its own, closed on exit.
    queue_projection: Callable[[], AbstractContextManager[QueueProjection]]
    read_models: Callable[[], ReadModels]
    # Each follower's way of applying one quarantined event, and how to read its row.
    appliers: Callable[[], AbstractContextManager[tuple[Mapping[str, ApplyOne], ReadRow]]]
    # An empty queue in memory, for a verify's fold of the log.
    scratch: Callable[[], QueueBackend]
    counted: Callable[[str], None] | None = None


# Tries of a requested queue rebuild that another process's rebuild overtook.
REBUILD_ATTEMPTS = 3


class Admin:
    """Every operation here needs the admin role."""

    def __init__(self, followers: Followers) -> None:
        self._followers = followers
        self._lock = threading.Lock()
        self.rebuild_task = TaskStatus("queue-rebuild")

    # ---- the queue ------------------------------------------------------------------

    def rebuild_queue(
        self, *, full: bool, by: Actor, via: str, progress: Progress = _no_progress
    ) -> RebuildReport:
        """Rebuild the queue from the open-executions checkpoint (``full``: by replaying
        the whole log); the projection logs ``queue.rebuilt`` naming who asked."""
        by.require(Role.ADMIN)
        # Asked for, not lost: a distinct event, so the alert on queue.lost stays quiet.
        log.info("queue.rebuild_requested", requested_by=by.name, full=full, via=via)
        with self._followers.queue_projection() as projection:
            for attempt in range(1, REBUILD_ATTEMPTS + 1):
                try:
                    return projection.rebuild(full=full, progress=progress, requested_by=by.name)
                except QueueLostError:
                    # A running projector that looked while this reset the queue saw no
                    # queue and rebuilt it too; the last rebuild started stands, so
                    # this one starts again rather than fail the operator's request.
                    if attempt == REBUILD_ATTEMPTS:
                        raise
                    log.info("queue.rebuild_raced", requested_by=by.name, attempt=attempt)
            raise AssertionError("unreachable: the last attempt returns or raises")

    def start_queue_rebuild(self, *, full: bool, by: Actor, clock: Clock) -> TaskStatus:
        """``rebuild_queue`` on a thread of its own; ``rebuild_task`` shows its progress."""
        by.require(Role.ADMIN)
        status = self.rebuild_task
        with self._lock:
            if status.state == "running":
                raise AlreadyRunningError(
                    "a queue rebuild is already running", fix="wait for it to end"
                )
            status.state, status.done, status.total, status.message = "running", 0, 0, ""
            status.started_at, status.finished_at = clock(), None
        threading.Thread(
            target=self._rebuild_in_background,
            args=(full, by, clock),
            name="queue-rebuild",
            daemon=True,
        ).start()
        return status

    def _rebuild_in_background(self, full: bool, by: Actor, clock: Clock) -> None:  # noqa: FBT001 (a thread target)
        status = self.rebuild_task

        def progress(done: int, total: int) -> None:
            status.done, status.total = done, total

        try:
            report = self.rebuild_queue(full=full, by=by, via="api", progress=progress)
            status.message = f"{report.items} open executions from the {report.source}"
            if report.quarantined:
                status.message += f"; {report.quarantined}"
            status.state = "done"
        except Exception as error:
            status.state, status.message = "failed", f"{type(error).__name__}: {error}"
            log.exception("queue.rebuild_failed", requested_by=by.name)
        finally:
            status.finished_at = clock()

    def verify_queue(self, *, by: Actor) -> tuple[list[str], Unapplied]:
        """The queue's differences from a fold of the log, and the events that fold
        could not apply, sorted by the quarantine table (nothing is recorded)."""
        by.require(Role.ADMIN)
        followers = self._followers
        isolation = isolation_of(
            QUEUE_FOLLOWER, followers.quarantine, persist=False, counted=followers.counted
        )
        scratch = followers.scratch()
        differences = verify_queue(followers.reader(), followers.queue, isolation, scratch=scratch)
        return differences, unapplied(isolation)

    # ---- the read models ------------------------------------------------------------

    def rebuild_read_models(
        self, *, by: Actor, progress: Progress = _no_progress
    ) -> ReadModelRebuild:
        """Fold the whole log into the read models anew (new tables, swapped in)."""
        by.require(Role.ADMIN)
        models = self._followers.read_models()
        events = models.rebuild(progress=progress)
        return ReadModelRebuild(events, models.isolation.summary())

    def catch_up_read_models(self) -> None:
        """Apply what the read models have not seen yet, here and now (a command that
        lists from them must not wait for the projector)."""
        models = self._followers.read_models()
        while models.step():
            pass

    # ---- quarantined events ---------------------------------------------------------

    def quarantined(self, *, by: Actor) -> list[QuarantinedEvent]:
        """Events a follower could not apply, in log order."""
        by.require(Role.ADMIN)
        return self._followers.quarantine.events()

    def quarantined_count(self) -> int:
        return self._followers.quarantine.count()

    def retry_quarantined(self, ids: Sequence[int] | None, *, by: Actor) -> RetryReport:
        """Apply quarantined events again (``ids`` and their streams, or all), each in
        the follower it failed in."""
        by.require(Role.ADMIN)
        try:
            with self._followers.appliers() as (appliers, read_row):
                return retry(self._followers.quarantine, appliers, read_row, ids=ids)
        except RetryStoppedError as error:
            raise StoresUnavailableError(
                str(error), fix="retry when the store and queue answer"
            ) from None

    def drop_quarantined(
        self, event_id: int, *, by: Actor, reason: str, at: datetime
    ) -> list[QuarantinedEvent]:
        """Give up on a quarantined event (and the later ones of its stream in that
        follower): the follower's state goes on without them. [] if there is none."""
        by.require(Role.ADMIN)
        dropped = self._followers.quarantine.drop(event_id, by=by.name, reason=reason, at=at)
        for event in dropped:
            log.warning(
                "projection.quarantine_dropped",
                id=event.id,
                follower=event.follower,
                position=event.position,
                originator_id=event.originator_id,
                by=by.name,
                reason=reason,
            )
        return dropped
