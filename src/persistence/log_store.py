"""The event store's own paths: what the ledger and its followers ask of a backend
beyond eventsourcing's recorder (ADR 87).

The recorder's interface saves and reads one stream, or one page of notifications, at a
time, through objects built per event. The hot paths need more: a batch saved in one
statement, many streams loaded in one round trip, a page of the log as plain rows, a
connection one thread keeps. Each backend answers them in its home under
``jobledger.adapters`` (PostgreSQL: COPY, ``ANY(ids)``, binary rows; SQLite: the
rowid). ``RecorderLogStore`` answers them through the recorder's interface alone, for
any recorder (the in-memory one of the unit tests), which is what the others fall back
to where they have no faster way.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias
from uuid import UUID

from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, StoredEvent

from jobledger.persistence.codec import StoredRow

# (notification id, originator id, originator version, topic, state): one stored event
# as a plain row. A page of these costs a fraction of a page of ``Notification``s.
LogRow: TypeAlias = tuple[int, UUID | str, int, str, bytes]
# (originator id, originator version, topic, state): a snapshot or an event, as stored.
StreamRow: TypeAlias = tuple[UUID, int, str, bytes]


class RowPage:
    __slots__ = ("position", "rows", "stamp")

    def __init__(self, rows: Sequence[LogRow], position: int, stamp: int | None = None) -> None:
        self.rows = rows
        self.position = position
        # The quarantine's stamp in the snapshot the page was read in (PostgreSQL's live
        # pages only): a follower reads the quarantine again only when it moved.
        self.stamp = stamp

    def full(self, page_size: int) -> bool:
        """Whether the page holds as many events as were asked for: if not, it reached
        the head of the log, and more can only come later."""
        return len(self.rows) >= page_size


def page_of(head: int, rows: Sequence[LogRow], limit: int, stamp: int | None = None) -> RowPage:
    """The page of ``rows`` read up to ``head``: a page short of ``limit`` reached the
    head, a full one ends at its last row."""
    if len(rows) < limit:
        return RowPage(rows, head, stamp)
    return RowPage(rows, rows[-1][0], stamp)


class Held(Protocol):
    """A connection of the store's pool that one thread keeps between uses."""

    def close(self) -> None:
        """Give the connection back to the pool (a later use takes one again)."""
        ...


@dataclass(frozen=True, slots=True)
class LivePage:
    """A read at the head of the log, as a follower makes it: on ``held``'s connection
    if given.

    With a topic filter the position still moves past the other events: up to the last
    notification id that existed when the read began, if the page was not full. Ids
    commit in order (the recorder locks the table), so nothing below that id can still
    appear."""

    limit: int
    topics: Sequence[str] = ()
    held: Held | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """A read of the log up to ``stop`` (a replay, a rebuild), or of the streams in one
    share ``part`` (index, count) of them from the next ``limit * count`` positions (a
    ValueError where the store cannot select a share). With ``text_ids``, a store may
    give the stream ids as text."""

    limit: int
    topics: Sequence[str] = ()
    stop: int | None = None
    part: tuple[int, int] | None = None
    text_ids: bool = False


# What one page read asks for: one kind a reader's intent.
RowRead: TypeAlias = LivePage | Window


class LogStore(Protocol):
    """The backend's paths for the ledger (saves, loads) and the log's readers."""

    def hold(self) -> Held | None:
        """A connection for one thread to keep (None where a store has no pool)."""
        ...

    @property
    def appends(self) -> bool:
        """Whether ``append`` saves faster than the recorder (the ledger asks first)."""
        ...

    def append(self, rows: Sequence[StoredEvent | StoredRow], held: Held | None) -> None:
        """Append ``rows`` in order in one transaction, as the recorder would (a version
        clash raises eventsourcing's IntegrityError)."""
        ...

    def newest_and_after(self, ids: Sequence[UUID]) -> list[StreamRow] | None:
        """For each of ``ids``: its newest snapshot, if any, then the events after it,
        the streams ordered by id, each in version order; None where the store cannot
        load them together."""
        ...

    def streams(self, ids: Sequence[UUID], held: Held | None) -> list[StreamRow] | None:
        """Every event of each of ``ids``, ordered by id and version; None where the
        store cannot load them together."""
        ...

    def positions(self, originator_id: UUID) -> dict[int, int]:
        """The log position of each event of one stream, by version ({} for a store
        that cannot say)."""
        ...

    def read_rows(self, after: int, read: RowRead) -> RowPage:
        """The next events after ``after`` (of ``read.topics`` only, if given), as rows."""
        ...


# What the composition root gives the ledger: its backend's store, on its recorders.
LogStoreFactory: TypeAlias = Callable[[ApplicationRecorder, AggregateRecorder | None], LogStore]


class RecorderLogStore:
    """A ``LogStore`` through the recorder's own interface: no faster paths."""

    def __init__(self, recorder: ApplicationRecorder, snapshots: AggregateRecorder | None) -> None:
        self.recorder = recorder
        self.snapshots = snapshots

    def hold(self) -> Held | None:
        return None

    # Saves are the recorder's anyway: the ledger records them the library's way.
    appends = False

    def append(self, rows: Sequence[StoredEvent | StoredRow], held: Held | None) -> None:  # noqa: ARG002 (the port's signature)
        self.recorder.insert_events([_stored_event(row) for row in rows])

    def newest_and_after(self, ids: Sequence[UUID]) -> list[StreamRow] | None:  # noqa: ARG002 (the port's signature)
        return None

    def streams(self, ids: Sequence[UUID], held: Held | None) -> list[StreamRow] | None:  # noqa: ARG002 (the port's signature)
        return None

    def positions(self, originator_id: UUID) -> dict[int, int]:  # noqa: ARG002 (the port's signature)
        return {}

    def read_rows(self, after: int, read: RowRead) -> RowPage:
        head = self.recorder.max_notification_id() or 0
        match read:
            case Window(part=tuple()):
                msg = "reading a share of the streams needs PostgreSQL"
                raise ValueError(msg)
            case Window(stop=int() as stop):
                head = min(head, stop)
        if head <= after:
            return RowPage((), after)
        notifications = self.recorder.select_notifications(
            start=after, limit=read.limit, stop=head, topics=read.topics, inclusive_of_start=False
        )
        rows: list[LogRow] = [
            (n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in notifications
        ]
        return page_of(head, rows, read.limit)


def _stored_event(row: StoredEvent | StoredRow) -> StoredEvent:
    if isinstance(row, StoredEvent):
        return row
    return StoredEvent(
        originator_id=row.originator_id,
        originator_version=row.originator_version,
        topic=row.topic,
        state=row.state,
    )
