"""What a follower's page costs on PostgreSQL: the head and the quarantine's stamp read
with the page, a pooled connection checked only after it idled, and a step that lets
events gather after a page short of full. Each keeps what it replaced. (That a
pipelined page commits whole is the ``Database`` port's suite, ``ports/test_database``.)"""

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from tests.integration.pool_stats import pool_requests

from jobledger.adapters.postgres import bounded as bounded_module
from jobledger.adapters.postgres.database import PostgresDatabase
from jobledger.adapters.sql.positions import SqlPosition
from jobledger.adapters.sql.quarantine import SqlQuarantineTable
from jobledger.bootstrap import read_models_on
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.reader import EXECUTION_EVENTS, LogReader
from jobledger.projections.quarantine import READ_MODELS_FOLLOWER, Isolation, Quarantine

if TYPE_CHECKING:
    from jobledger.persistence.log_store import LogRow

AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture
def ledger(postgres_ledger: Ledger) -> Ledger:
    return postgres_ledger


@pytest.fixture
def database(postgres_url: str) -> Iterator[PostgresDatabase]:
    opened = PostgresDatabase(postgres_url, max_size=1)
    yield opened
    opened.close()


def enqueue(ledger: Ledger, count: int) -> None:
    spec = ExecutionSpec(handler="test.echo")
    runs = [
        Execution.enqueue(
            spec=spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key=uuid.uuid4().hex
        )
        for _ in range(count)
    ]
    ledger.save(*runs)


# More appends than the ledger's pool holds connections: each has been used once.
POOL_CYCLE = 10


def backend_pid(database: PostgresDatabase) -> int:
    with database.transaction() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_page_carries_the_head_it_was_read_under(ledger: Ledger) -> None:
    """If the log is empty, then a page is empty at position 0; if it holds events
    after the position, then the page holds them up to its size and ends at the last
    one read, or at the head when short of full; and if only events of other topics
    follow, then the page is empty and still moves to the head."""
    reader = LogReader(ledger, page_size=3)
    empty = reader.rows(0)
    assert (list(empty.rows), empty.position) == ([], 0)
    enqueue(ledger, 5)
    first = reader.rows(0)
    assert [row[0] for row in first.rows] == [1, 2, 3]
    assert first.position == 3
    assert first.full(3)
    rest = reader.rows(first.position)
    assert [row[0] for row in rest.rows] == [4, 5]
    assert rest.position == 5
    assert not rest.full(3)
    assert reader.rows(5).position == 5
    others = LogReader(ledger, page_size=3, topics=["no such topic"])
    page = others.rows(0)
    assert (list(page.rows), page.position) == ([], 5)
    assert set(EXECUTION_EVENTS) >= {row[3] for row in first.rows}


def test_a_topic_list_with_quotes_and_percents_filters_as_given(ledger: Ledger) -> None:
    """If a reader's topics hold characters SQL, the array syntax or a placeholder treat
    specially, then its pages (live, up to a stop, and a share of the streams) hold the
    events of the listed topics and nothing else."""
    enqueue(ledger, 4)
    odd = ["it's", "50%s", "%", "a,b", "{c}", 'd"e', "f\\g", "NULL", " "]
    reader = LogReader(ledger, page_size=10, topics=[*odd, Execution.Enqueued.TOPIC])
    live = reader.rows(0)
    assert [row[0] for row in live.rows] == [1, 2, 3, 4]
    assert [row[0] for row in reader.rows(0, 3).rows] == [1, 2, 3]
    shares = [LogReader(ledger, page_size=10, topics=odd, part=(i, 2)) for i in range(2)]
    assert [list(share.rows(0).rows) for share in shares] == [[], []]


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The connections a pool checks at checkout, from now on."""
    seen: list[Any] = []
    original = ConnectionPool.check_connection

    def counting(conn: psycopg.Connection[Any]) -> None:
        seen.append(conn)
        original(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counting))
    return seen


def test_a_connection_just_returned_is_not_checked(
    database: PostgresDatabase, checked: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a connection is taken again the moment it came back, then no check query
    goes out for it; once it has idled FRESH_SECONDS, it is checked at checkout."""
    backend_pid(database)
    checked.clear()
    backend_pid(database)
    assert checked == []
    monkeypatch.setattr(bounded_module, "FRESH_SECONDS", 0.0)
    backend_pid(database)
    assert len(checked) == 1


def test_the_event_stores_connection_just_returned_is_not_checked(
    ledger: Ledger, checked: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the event store's pool gives back a connection the moment it came back (one
    append after another, as an API process enqueues), then no check query goes out
    for it; once it has idled FRESH_SECONDS, it is checked at checkout."""
    for _ in range(POOL_CYCLE):  # the pool hands its connections round in turn
        enqueue(ledger, 1)
    checked.clear()
    enqueue(ledger, 1)
    assert checked == []
    monkeypatch.setattr(bounded_module, "FRESH_SECONDS", 0.0)
    enqueue(ledger, 1)
    assert len(checked) == 1


def test_a_connection_the_server_dropped_while_idle_is_replaced(
    database: PostgresDatabase, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the server ends a pooled connection while it idles, then the next
    transaction gets a working connection instead of an error."""
    pid = backend_pid(database)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    monkeypatch.setattr(bounded_module, "FRESH_SECONDS", 0.0)  # it has idled
    assert backend_pid(database) != pid


def test_a_step_after_a_short_page_lets_events_gather(
    ledger: Ledger, database: PostgresDatabase
) -> None:
    """If the read models' page is full, then the step says more may be waiting; if it
    is short of full (the head was reached), then it says no, and the follower waits
    for a wake-up and then lets events gather in proportion to that page (a whole
    window from GATHER_EVENTS on; none after a step that found nothing). Every event
    is folded either way."""
    from jobledger.projections.read_models.follower import (  # noqa: PLC0415 (here only)
        GATHER_EVENTS,
    )

    models = read_models_on(
        ledger,
        database,
        page_size=4,
    )
    enqueue(ledger, 6)
    assert models.step() is True
    assert models.position() == 4
    assert models.step() is False
    assert models.position() == 6
    assert models.gather(0.02) == 0.02 * 2 / GATHER_EVENTS
    assert models.step() is False
    assert models.gather(0.02) == 0
    models._reader.page_size = 2 * GATHER_EVENTS
    enqueue(ledger, GATHER_EVENTS)
    assert models.step() is False
    assert models.gather(0.02) == 0.02
    with database.transaction(snapshot=True) as cursor:
        cursor.execute("SELECT count(*) FROM jobledger_rm_executions")
        assert cursor.fetchone()[0] == 6 + GATHER_EVENTS


def test_a_position_moved_by_another_process_is_read_again(
    ledger: Ledger, database: PostgresDatabase, postgres_url: str
) -> None:
    """If another process moves the read models' position after this follower's last
    page, then the follower's next page is refused by its claim, read again from the
    moved position, and nothing is folded twice or skipped."""
    models = read_models_on(
        ledger,
        database,
        page_size=100,
    )
    enqueue(ledger, 3)
    models.step()
    other_database = PostgresDatabase(postgres_url, max_size=1)
    try:
        enqueue(ledger, 2)
        read_models_on(
            ledger,
            other_database,
            page_size=100,
        ).step()
    finally:
        other_database.close()
    enqueue(ledger, 2)
    assert models.step() is True  # the claim failed: read the position again
    models.step()
    assert models.position() == 7
    with database.transaction(snapshot=True) as cursor:
        cursor.execute("SELECT count(*), sum(version) FROM jobledger_rm_executions")
        assert tuple(cursor.fetchone()) == (7, 7)


def test_a_claim_waits_for_the_holder_and_answers_its_position(
    database: PostgresDatabase, postgres_url: str
) -> None:
    """If another transaction holds a follower's position and moves it, then a claim
    in a second process waits for its commit and refuses the old start; a claim of the
    new start holds, and a follower's first claim makes its row at 0."""
    name = f"claim-{uuid.uuid4().hex}"
    other_database = PostgresDatabase(postgres_url, max_size=1)
    answers: list[bool] = []

    def claim_from_zero() -> None:
        with other_database.transaction() as cursor:
            answers.append(SqlPosition(other_database, name).claim(cursor, 0))

    try:
        with database.transaction() as cursor:
            assert SqlPosition(database, name).claim(cursor, 0)
            waiter = threading.Thread(target=claim_from_zero)
            waiter.start()
            waiter.join(timeout=0.5)
            assert waiter.is_alive()  # waits for the lock
            SqlPosition(database, name).write(cursor, 5)
        waiter.join(timeout=10)
        assert answers == [False]
        with other_database.transaction() as cursor:
            assert SqlPosition(other_database, name).claim(cursor, 5)
    finally:
        other_database.close()


def test_the_stamp_read_with_a_page_moves_with_every_change_of_the_quarantine(
    ledger: Ledger, database: PostgresDatabase
) -> None:
    """If the quarantine table does not change, then pages carry the same stamp; if an
    event is recorded, seen again, dropped or removed, then the next page's stamp is
    another one."""
    reader = LogReader(ledger, page_size=10)
    enqueue(ledger, 2)
    quarantine = Quarantine(SqlQuarantineTable(database))
    stamps = [reader.rows(0).stamp, reader.rows(0).stamp]
    assert stamps[0] is not None
    assert stamps[0] == stamps[1]
    row = reader.rows(0).rows[0]
    quarantine.record(READ_MODELS_FOLLOWER, row, "boom", at=AT)
    stamps.append(reader.rows(0).stamp)
    quarantine.record(READ_MODELS_FOLLOWER, row, "boom again", at=AT)
    stamps.append(reader.rows(0).stamp)
    (event,) = quarantine.events()
    quarantine.drop(event.id, by="admin", reason="test", at=AT)
    stamps.append(reader.rows(0).stamp)
    quarantine.remove(event.id)
    stamps.append(reader.rows(0).stamp)
    assert len(set(stamps[1:])) == len(stamps) - 1


def test_a_stream_isolated_by_another_process_is_held_at_the_next_page(
    ledger: Ledger, database: PostgresDatabase
) -> None:
    """If two processes follow the same log for one follower and one of them isolates
    an event, then the other, whose copy of the held streams was current, holds the
    stream's later events from its next page on."""
    reader = LogReader(ledger, page_size=10)
    spec = ExecutionSpec(handler="test.echo")
    run = Execution.enqueue(spec=spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key="k")
    ledger.save(run)
    applied: list[int] = []

    def apply_rows(rows: Any, start: int, position: int) -> bool:
        del start, position
        applied.extend(r[0] for r in rows)
        return True

    here = Isolation(READ_MODELS_FOLLOWER, Quarantine(SqlQuarantineTable(database)))
    elsewhere = Isolation(READ_MODELS_FOLLOWER, Quarantine(SqlQuarantineTable(database)))
    first = reader.rows(0)
    assert here.apply(first, 0, apply_rows)  # the copy is read under the first stamp
    first_row: LogRow = first.rows[0]
    elsewhere.isolate(first_row, ValueError("cannot apply"))
    run.cancel(by="admin", reason="test")
    ledger.save(run)
    assert here.apply(reader.rows(first.position), first.position, apply_rows)
    assert applied == [first_row[0]]
    assert [r[0] for r, _error in here.isolated] == [first.position + 1]


def test_a_reader_that_holds_a_connection_reads_its_pages_on_it(ledger: Ledger) -> None:
    """If a follower's reader holds a connection, then its pages after the first ask the
    pool for nothing and equal a pooled reader's; once released, pages use the pool
    again. (A held connection the server ended is replaced: test_writer.py.)"""
    reader = LogReader(ledger, page_size=2)
    pooled = LogReader(ledger, page_size=2)
    enqueue(ledger, 6)
    reader.hold()
    try:
        reader.rows(0)
        before = pool_requests(ledger)
        pages = [reader.rows(position) for position in (0, 2, 4)]
        assert pool_requests(ledger) == before
        expected = [pooled.rows(position) for position in (0, 2, 4)]
        assert [(p.rows, p.position, p.stamp) for p in pages] == [
            (p.rows, p.position, p.stamp) for p in expected
        ]
    finally:
        reader.release()
    before = pool_requests(ledger)
    reader.rows(0)
    assert pool_requests(ledger) > before
