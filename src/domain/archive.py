"""The History aggregate: one archive of closed executions' events (ADR 45).

When closed executions' events leave the log for an archive file, the log keeps a
record of it: ``HistoryArchived``, in the same transaction that removes them. Each
archive is a stream of its own, its id derived from the archive's name, so the same
archive cannot be recorded twice, whoever tries.
"""

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta

from eventsourcing.domain import Aggregate, event

from jobledger.domain.errors import InvalidDefinitionError, InvalidTransitionError
from jobledger.domain.json_values import (
    MAX_REASON_CHARS,
    check_actor,
    check_reason,
    check_text,
)

# Namespace for history archive ids, derived from the archive's name.
HISTORY_NAMESPACE = uuid.UUID("5e0c1c64-3f5d-4b2a-8a61-0d7f4e9c2b83")
SHA256_HEX_CHARS = 64


def history_id(name: str) -> uuid.UUID:
    return uuid.uuid5(HISTORY_NAMESPACE, name)


class History(Aggregate):
    """An archive of the events of closed executions, removed from the log."""

    TOPIC = "jobledger:History"

    class Created(Aggregate.Created):
        # Never emitted (a history begins with Archived); eventsourcing wants every event
        # class of an aggregate with a stable topic to have one.
        TOPIC = "jobledger:HistoryCreated"

    class Archived(Aggregate.Created):
        """Events of closed executions moved from the log to an archive: positions
        ``first_position`` to ``last_position`` (not all of them: what stays open stays),
        ``events`` events of ``executions`` executions, closed before ``cutoff``."""

        TOPIC = "jobledger:HistoryArchived"
        name: str
        location: str
        first_position: int
        last_position: int
        executions: int
        events: int
        cutoff: datetime
        sha256: str
        manifest_sha256: str
        by: str
        # An archive an admin forced past the retention says why (none before: never).
        reason: str = ""
        forced: bool = False

    class Restored(Aggregate.Event):
        """The archive's events were put back into the log at their old positions."""

        TOPIC = "jobledger:HistoryRestored"
        name: str
        by: str

    @event(Archived)
    def __init__(
        self,
        *,
        name: str,
        location: str,
        first_position: int,
        last_position: int,
        executions: int,
        events: int,
        cutoff: datetime,
        sha256: str,
        manifest_sha256: str,
        by: str,
        reason: str = "",
        forced: bool = False,
    ) -> None:
        del location, sha256, manifest_sha256, by, cutoff, reason, forced
        self.name = name
        self.positions = (first_position, last_position)
        self.counts = (executions, events)
        self.restored = False

    @classmethod
    def archived(cls, record: "ArchiveRecord") -> "History":
        """The record of one verified archive (refused if it is not one)."""
        record.check()
        return cls._create(
            cls.Archived,
            id=history_id(record.name),
            name=record.name,
            location=record.location,
            first_position=record.first_position,
            last_position=record.last_position,
            executions=record.executions,
            events=record.events,
            cutoff=record.cutoff,
            sha256=record.sha256,
            manifest_sha256=record.manifest_sha256,
            by=record.by,
            reason=record.reason,
            forced=record.forced,
        )

    def restore(self, *, by: str) -> None:
        """Record that the archive's events are back in the log (once)."""
        check_actor(by)
        self._check_not_restored()
        self._restored(name=self.name, by=by)

    def _check_not_restored(self) -> None:
        if self.restored:
            raise InvalidTransitionError(f"archive {self.name} was restored already")

    @event(Restored)
    def _restored(self, *, name: str, by: str) -> None:
        del name, by
        self.restored = True


class ArchiveRecord:
    """What ``HistoryArchived`` records of one archive, checked before it is."""

    __slots__ = (
        "by",
        "cutoff",
        "events",
        "executions",
        "first_position",
        "forced",
        "last_position",
        "location",
        "manifest_sha256",
        "name",
        "reason",
        "sha256",
    )

    def __init__(
        self,
        *,
        name: str,
        location: str,
        positions: tuple[int, int],
        counts: tuple[int, int],
        cutoff: datetime,
        sums: tuple[str, str],
        by: str,
        forced_because: str | None = None,
    ) -> None:
        self.name, self.location, self.cutoff, self.by = name, location, cutoff, by
        self.forced, self.reason = forced_because is not None, forced_because or ""
        self.first_position, self.last_position = positions
        self.executions, self.events = counts
        self.sha256, self.manifest_sha256 = sums

    def check(self) -> None:
        check_reason(self.by, self.reason)
        self._check_range()
        self._check_counts()
        self._check_sums()

    def _check_range(self) -> None:
        if not 0 < self.first_position <= self.last_position:
            raise InvalidDefinitionError(
                "positions",
                f"{self.first_position} to {self.last_position} is not a range of the log",
                "archive events at positions 1 or more, first to last",
            )

    def _check_counts(self) -> None:
        if not 0 < self.executions <= self.events:
            raise InvalidDefinitionError(
                "counts",
                f"{self.events} events of {self.executions} executions",
                "archive at least one execution, each with one event or more",
            )

    def _check_sums(self) -> None:
        for value in (self.sha256, self.manifest_sha256):
            if len(value) != SHA256_HEX_CHARS or value.strip("0123456789abcdef"):
                raise InvalidDefinitionError(
                    "sha256", f"{value!r} is not a sha256 sum", "give 64 lower-case hex digits"
                )


class Retention:
    """How long closed executions' history stays in the log: ``days`` for every queue
    but those ``queues`` names. The retention is a floor: an earlier ``before`` moves
    every queue's cut-off back to it, a later one is held to the retention, unless the
    archive is forced: an admin's request, ``forced_because`` their reason, which the
    archive's record keeps."""

    def __init__(
        self,
        days: float,
        queues: Mapping[str, float] | None = None,
        *,
        before: datetime | None = None,
        forced_because: str | None = None,
    ) -> None:
        if forced_because is not None:
            _check_forced(before, forced_because)
        self.days = days
        self.queues = dict(queues or {})
        self.before = before
        self.forced_because = forced_because

    def cutoff(self, queue: str, *, at: datetime) -> datetime:
        """Executions of ``queue`` closed before this may be archived."""
        return self._bounded(at - timedelta(days=self.queues.get(queue, self.days)))

    def latest_cutoff(self, *, at: datetime) -> datetime:
        """The latest cut-off of any queue: nothing created after it may be archived."""
        return self._bounded(at - timedelta(days=min([self.days, *self.queues.values()])))

    def held(self, *, at: datetime) -> bool:
        """Whether ``before`` asked for more than the retention lets go."""
        return self.before is not None and self.latest_cutoff(at=at) < self.before

    def _bounded(self, floor: datetime) -> datetime:
        if self.before is None:
            return floor
        return self.before if self.forced_because is not None else min(self.before, floor)


def _check_forced(before: datetime | None, reason: str) -> None:
    """A forced archive removes runs someone may still look for: it says up to when,
    and why, for the log."""
    if before is None:
        raise InvalidDefinitionError(
            "before", "is not given", "say up to when a forced archive goes (--before TIME)"
        )
    check_text(reason, "reason", max_chars=MAX_REASON_CHARS)
    if not reason.strip():
        raise InvalidDefinitionError(
            "reason", "is empty", "say why runs younger than the retention go (--reason TEXT)"
        )
