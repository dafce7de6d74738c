"""Isolating events a follower cannot apply: the page fallback, held streams, outages."""

import sqlite3
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec
import psycopg
import pytest
import redis

from jobledger.persistence.log_store import LogRow, RowPage
from jobledger.projections.errors import QueueLostError
from jobledger.projections.quarantine import (
    HELD,
    Isolation,
    Quarantine,
    QuarantinedEvent,
    is_outage,
    retry,
)

TOPIC = "jobledger.domain.execution:Execution.Enqueued"


def row(position: int, stream: uuid.UUID | None = None, version: int = 1) -> LogRow:
    return (position, stream or uuid.uuid4(), version, TOPIC, b"{}")


class Follower:
    """A fake follower: applies rows one page (transaction) at a time, like a store
    whose page fails as a whole when one of its events fails."""

    def __init__(self, bad: set[int], error: Exception | None = None) -> None:
        self.bad = bad
        self.error = error or ValueError("can't serialize ints < -2**63 or > 2**64 - 1")
        self.applied: list[int] = []
        self.position = 0
        self.calls = 0

    def apply_rows(self, rows: Sequence[LogRow], start: int, position: int) -> bool:
        self.calls += 1
        assert start == self.position, "a page must start where the follower is"
        if any(r[0] in self.bad for r in rows):
            raise self.error  # the whole transaction rolls back
        self.applied += [r[0] for r in rows]
        self.position = position
        return True


def test_one_bad_event_in_a_page_of_good_ones_is_isolated() -> None:
    """If one event of a page cannot be applied, then its neighbours are applied exactly
    once, in order, the bad one is isolated with its error, and the follower ends at the
    page's end."""
    rows = [row(p) for p in range(1, 11)]
    follower = Follower(bad={4})
    isolation = Isolation("queue-projection")
    assert isolation.apply(RowPage(rows, 12), 0, follower.apply_rows)
    assert follower.applied == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    assert follower.position == 12
    [(isolated, error)] = isolation.isolated
    assert isolated[0] == 4
    assert "can't serialize ints" in error
    assert "ValueError" in error


def test_a_good_page_is_applied_in_one_call() -> None:
    """If every event of a page applies, then the page goes in one call (no fallback)."""
    follower = Follower(bad=set())
    Isolation("read-models").apply(
        RowPage([row(p) for p in range(1, 6)], 5), 0, follower.apply_rows
    )
    assert follower.calls == 1
    assert follower.applied == [1, 2, 3, 4, 5]


def test_later_events_of_an_isolated_stream_are_held() -> None:
    """If an event is isolated, then the later events of its stream are held (isolated
    too, not applied), in this page and in the pages after it; other streams go on."""
    stream = uuid.uuid4()
    follower = Follower(bad={2})
    isolation = Isolation("checkpoint-projection")
    first = [row(1), row(2, stream, 1), row(3, stream, 2), row(4)]
    isolation.apply(RowPage(first, 4), 0, follower.apply_rows)
    isolation.apply(RowPage([row(5, stream, 3), row(6)], 6), 4, follower.apply_rows)
    assert follower.applied == [1, 4, 6]
    assert [(r[0], e == HELD) for r, e in isolation.isolated] == [
        (2, False),
        (3, True),
        (5, True),
    ]
    assert follower.position == 6


@pytest.mark.parametrize(
    "outage",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        redis.ConnectionError("Connection refused"),
        redis.TimeoutError("Timeout reading from socket"),
        TimeoutError("timed out"),
        QueueLostError(),
        redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'"),
        psycopg.errors.UndefinedTable('relation "jobledger_rm_jobs" does not exist'),
        psycopg.errors.UndefinedColumn('column "attempt_budget" does not exist'),
        sqlite3.OperationalError("table jobledger_rm_executions has no column named x"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
    ],
)
def test_an_outage_is_raised_not_quarantined(outage: Exception) -> None:
    """If applying fails because a dependency is down (or a table is missing), then the
    error is raised for the follower's back-off and no event is isolated."""
    follower = Follower(bad={2}, error=outage)
    isolation = Isolation("queue-projection")
    with pytest.raises(type(outage)):
        isolation.apply(RowPage([row(1), row(2), row(3)], 3), 0, follower.apply_rows)
    assert isolation.isolated == []
    assert is_outage(outage)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad"),
        OverflowError("int too big"),
        psycopg.errors.StringDataRightTruncation("value too long"),
        redis.ResponseError("ERR Error running script"),
    ],
)
def test_errors_about_the_event_are_not_outages(error: Exception) -> None:
    """If an error is about the data applied, then it is not taken for an outage."""
    assert not is_outage(error)


def test_a_replay_isolates_row_by_row() -> None:
    """If a replay's fold fails on one event, then the rest of the replay goes on and
    the events of that stream after it are held."""
    stream = uuid.uuid4()
    folded: list[int] = []

    def fold(log_row: LogRow) -> None:
        if log_row[0] == 2:
            raise TypeError("cannot decode")
        folded.append(log_row[0])

    isolation = Isolation("queue-projection", persist=False)
    isolation.each([row(1), row(2, stream), row(3), row(4, stream, 2)], fold)
    assert folded == [1, 3]
    assert [r[0] for r, _ in isolation.isolated] == [2, 4]
    assert "2 event(s) quarantined in queue-projection" in isolation.summary()


def test_a_decoding_replay_isolates_row_by_row() -> None:
    """If a replay cannot decode one event, then it has the others' events in order,
    with their streams' ids as text, and the events of that stream after it are held."""
    stream = uuid.uuid4()

    def decode(originator_id: uuid.UUID | str, version: int, topic: str, state: bytes) -> str:
        if originator_id == stream and version == 1:
            raise TypeError("cannot decode")
        return f"{topic} {state!r}"

    isolation = Isolation("read-models", persist=False)
    rows = [row(1), row(2, stream), row(3), row(4, stream, 2)]
    decoded = isolation.decoded(rows, decode)
    assert decoded == [(r[0], str(r[1]), f"{TOPIC} b'{{}}'") for r in (rows[0], rows[2])]
    assert [(r[0], error == HELD) for r, error in isolation.isolated] == [(2, False), (4, True)]


def test_a_follower_that_holds_no_stream_applies_the_later_events() -> None:
    """If a follower isolates without holding (the job-schedule index), then the later
    events of an isolated stream are still applied."""
    stream = uuid.uuid4()
    follower = Follower(bad={1})
    isolation = Isolation("job-schedule", hold=False)
    isolation.apply(RowPage([row(1, stream), row(2, stream, 2)], 2), 0, follower.apply_rows)
    isolation.apply(RowPage([row(3, stream, 3)], 3), 2, follower.apply_rows)
    assert follower.applied == [2, 3]
    assert [r[0] for r, _ in isolation.isolated] == [1]


class Table(Quarantine):
    """The quarantine table in memory (no database)."""

    def __init__(self) -> None:
        self.rows: dict[int, QuarantinedEvent] = {}

    def add(self, follower: str, log_row: LogRow) -> int:
        event_id = len(self.rows) + 100
        at = datetime.now(tz=UTC)
        self.rows[event_id] = QuarantinedEvent(
            id=event_id,
            follower=follower,
            position=log_row[0],
            originator_id=str(log_row[1]),
            originator_version=log_row[2],
            topic=log_row[3],
            error="boom",
            first_seen=at,
            last_seen=at,
            attempts=1,
        )
        return event_id

    def held(self, follower: str) -> dict[str, int]:
        held: dict[str, int] = {}
        for e in self.rows.values():
            if e.follower == follower:
                held[e.originator_id] = min(held.get(e.originator_id, 10**9), e.originator_version)
        return held

    def events(
        self, *, follower: str | None = None, dropped: bool = False
    ) -> list[QuarantinedEvent]:
        found = [
            e
            for e in self.rows.values()
            if follower in {None, e.follower} and (e.dropped_at is not None) == dropped
        ]
        return sorted(found, key=lambda e: e.position)

    def remove(self, event_id: int) -> None:
        del self.rows[event_id]

    def failed_again(self, event_id: int, error: str, *, at: datetime) -> None:
        event = self.rows[event_id]
        self.rows[event_id] = msgspec.structs.replace(
            event, error=error, last_seen=at, attempts=event.attempts + 1
        )


def test_a_replay_holds_a_stream_from_its_first_quarantined_version() -> None:
    """If a stream's second event is quarantined, then a replay folds its first event
    (the follower had applied it) and holds the second and later ones."""
    stream = uuid.uuid4()
    table = Table()
    table.add("queue-projection", row(2, stream, 2))
    folded: list[int] = []
    isolation = Isolation("queue-projection", table, persist=False)
    isolation.each(
        [row(1, stream, 1), row(2, stream, 2), row(3, stream, 3)], lambda r: folded.append(r[0])
    )
    assert folded == [1]
    assert [r[0] for r, error in isolation.isolated if error == HELD] == [2, 3]


def test_a_retry_applies_in_order_and_picks_up_events_held_meanwhile() -> None:
    """If a retry applies a stream while its follower holds one more event of it, then
    that event is applied in a later pass; a stream whose event fails again keeps its
    later events waiting."""
    good, bad = uuid.uuid4(), uuid.uuid4()
    log_rows = {1: row(1, good, 1), 2: row(2, bad, 1), 3: row(3, bad, 2), 4: row(4, good, 2)}
    table = Table()
    for position in (1, 2, 3):
        table.add("read-models", log_rows[position])
    applied: list[int] = []

    def apply_one(log_row: LogRow) -> None:
        if log_row[1] == bad:
            raise ValueError("still bad")
        applied.append(log_row[0])
        if log_row[0] == 1:  # the running follower holds the stream's next event
            table.add("read-models", log_rows[4])

    report = retry(table, {"read-models": apply_one}, log_rows.get)
    assert applied == [1, 4]
    assert [e.position for e in report.applied] == [1, 4]
    assert [(e.position, error) for e, error in report.failed] == [(2, "ValueError: still bad")]
    assert [e.position for e in report.waiting] == [3]
    assert sorted((e.position, e.attempts) for e in table.rows.values()) == [(2, 2), (3, 1)]


class CountedTable(Table):
    """The table in memory, counting how often a follower reads what it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.fail_reads = False

    def held(self, follower: str) -> dict[str, int]:
        self.reads += 1
        if self.fail_reads:
            raise psycopg.OperationalError("connection refused")
        return super().held(follower)

    def record(self, follower: str, row: LogRow, error: str, *, at: datetime) -> bool:
        del error, at  # the fake keeps only what ``held`` reads
        self.add(follower, row)
        return True


def test_the_table_is_read_again_only_when_the_stamp_moved() -> None:
    """If pages come with the stamp the table was last read under, then the table is not
    read again for them; a page with another stamp, or with none, reads it again, and a
    page of no events reads nothing."""
    table = CountedTable()
    follower = Follower(bad=set())
    isolation = Isolation("read-models", table)
    isolation.apply(RowPage([row(1)], 1, stamp=7), 0, follower.apply_rows)
    isolation.apply(RowPage([row(2)], 2, stamp=7), 1, follower.apply_rows)
    isolation.apply(RowPage([], 3, stamp=8), 2, follower.apply_rows)
    assert table.reads == 1
    isolation.apply(RowPage([row(4)], 4, stamp=8), 3, follower.apply_rows)
    assert table.reads == 2
    isolation.apply(RowPage([row(5)], 5), 4, follower.apply_rows)
    isolation.apply(RowPage([row(6)], 6), 5, follower.apply_rows)
    assert table.reads == 4
    assert follower.applied == [1, 2, 4, 5, 6]


def test_a_moved_stamp_shows_streams_held_or_released_elsewhere() -> None:
    """If another process quarantines a stream, or an operator releases one, then the
    next page with a new stamp holds, or applies, that stream's events."""
    stream = uuid.uuid4()
    table = CountedTable()
    follower = Follower(bad=set())
    isolation = Isolation("read-models", table)
    isolation.apply(RowPage([row(1)], 1, stamp=1), 0, follower.apply_rows)
    table.add("read-models", row(2, stream, 1))  # another process isolated it
    isolation.apply(RowPage([row(3, stream, 2)], 3, stamp=2), 1, follower.apply_rows)
    assert follower.applied == [1]
    for event in table.events(follower="read-models"):  # an operator's retry applied them
        table.remove(event.id)
    isolation.apply(RowPage([row(4, stream, 3)], 4, stamp=3), 3, follower.apply_rows)
    assert follower.applied == [1, 4]


def test_an_isolation_here_reads_the_table_again_at_the_next_page() -> None:
    """If the follower isolates an event, then the next page reads the table again
    though its stamp did not move: the table, not the follower's copy, says what it
    holds (the record may have failed)."""
    table = CountedTable()
    follower = Follower(bad={2})
    isolation = Isolation("read-models", table)
    isolation.apply(RowPage([row(1), row(2)], 2, stamp=5), 0, follower.apply_rows)
    reads = table.reads
    isolation.apply(RowPage([row(3)], 3, stamp=5), 2, follower.apply_rows)
    assert table.reads == reads + 1
    assert follower.applied == [1, 3]


def test_a_failed_read_of_the_table_is_not_taken_for_a_read() -> None:
    """If reading the table fails (the store is down), then the next page under the
    same stamp reads it again instead of trusting the copy from before."""
    table = CountedTable()
    follower = Follower(bad=set())
    isolation = Isolation("read-models", table)
    isolation.apply(RowPage([row(1)], 1, stamp=1), 0, follower.apply_rows)
    table.add("read-models", row(2, uuid.uuid4(), 1))
    table.fail_reads = True
    with pytest.raises(psycopg.OperationalError):
        isolation.apply(RowPage([row(3)], 3, stamp=2), 1, follower.apply_rows)
    table.fail_reads = False
    reads = table.reads
    isolation.apply(RowPage([row(3)], 3, stamp=2), 1, follower.apply_rows)
    assert table.reads == reads + 1
    assert follower.applied == [1, 3]
