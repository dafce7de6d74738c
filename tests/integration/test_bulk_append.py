"""Large saves go into the PostgreSQL log with COPY: the same events, order, atomicity,
notifications and version checks as the recorder's own insert."""

import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from eventsourcing.persistence import DataError, IntegrityError
from eventsourcing.postgres import PostgresApplicationRecorder

from jobledger.adapters.postgres import bulk
from jobledger.adapters.postgres.held import HeldConnection
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.reader import LogReader

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
# A save of many events (every save goes through COPY; many is what the writer saves).
LARGE = 200


@pytest.fixture
def ledger(postgres_ledger: Ledger) -> Ledger:
    return postgres_ledger


def runs(count: int) -> list[Execution]:
    spec = ExecutionSpec(handler="test.echo", payload={"big": 2**62, "text": "ünïcode \u2603"})
    return [
        Execution.enqueue(
            spec=spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key=uuid.uuid4().hex
        )
        for _ in range(count)
    ]


def test_a_large_save_reads_back_equal_in_order(ledger: Ledger) -> None:
    """If a save is large enough to go through COPY, then every event reads back equal,
    with its types, in the order given; an aggregate's later events in the same save
    follow its first."""
    executions = runs(LARGE)
    for execution in executions[:5]:
        execution.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=AT + timedelta(1))
    events = [e for x in executions for e in x.collect_events()]
    ledger.save_events(events)
    reader = LogReader(ledger, page_size=10_000, topics=())
    stored, _ = reader.page(0)
    assert [(e.originator_id, e.originator_version) for e in stored] == [
        (e.originator_id, e.originator_version) for e in events
    ]
    assert stored == events
    assert ledger.get_execution(executions[0].id).worker_id == "w"


def test_a_clash_in_a_large_save_writes_none_of_it(ledger: Ledger) -> None:
    """If one event of a large save takes a version already in the log, then the save
    raises IntegrityError and the log holds none of its events."""
    first = runs(1)
    ledger.save_events([e for x in first for e in x.collect_events()])
    head = ledger.recorder.max_notification_id()
    again = Execution.enqueue(
        spec=first[0].spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key=first[0].trigger_key
    )
    batch = [e for x in [*runs(LARGE), again] for e in x.collect_events()]
    with pytest.raises(IntegrityError):
        ledger.save_events(batch)
    assert ledger.recorder.max_notification_id() == head


def test_a_large_save_notifies_the_followers(ledger: Ledger, postgres_url: str) -> None:
    """If a large save commits, then a LISTEN on the log's channel hears of it."""
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute("LISTEN jobledger_events")
        ledger.save_events([e for x in runs(LARGE) for e in x.collect_events()])
        heard = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in heard] == ["jobledger_events"]


def test_a_large_save_waits_for_the_lock_that_orders_the_log(
    ledger: Ledger, postgres_url: str
) -> None:
    """If another writer's transaction is open on the events table (it holds the lock
    an insert takes), then a large save waits for it to end before it takes ids: so
    ids commit in the order they were taken, and a follower never reads past an id
    still to commit."""
    events = [e for x in runs(LARGE) for e in x.collect_events()]
    saved = threading.Event()
    with psycopg.connect(postgres_url) as holder:
        holder.execute("LOCK TABLE jobledger_events IN ROW EXCLUSIVE MODE")

        def save() -> None:
            ledger.save_events(events)
            saved.set()

        saver = threading.Thread(target=save)
        saver.start()
        assert not saved.wait(1.0)  # blocked behind the lock
        holder.rollback()
    saver.join(10)
    assert saved.is_set()
    assert ledger.recorder.max_notification_id() == len(events)


def test_a_save_larger_than_a_chunk_reads_back_equal(ledger: Ledger) -> None:
    """If a save's rows take several of the pieces the COPY's data is sent in, then
    every event reads back equal, in order."""
    spec = ExecutionSpec(handler="test.echo", payload={"text": "x" * 4000})
    executions = [
        Execution.enqueue(spec=spec, ready_at=AT, trigger=Trigger.ADHOC) for _ in range(100)
    ]
    events = [e for x in executions for e in x.collect_events()]
    ledger.save_events(events)
    stored, _ = LogReader(ledger, page_size=10_000, topics=()).page(0)
    assert stored == events


def test_a_held_connection_saves_again_after_a_clash(ledger: Ledger) -> None:
    """If a save on a held connection clashes, then the next save through it commits,
    on a connection with no transaction left open."""
    held = ledger.held_connection()
    assert isinstance(held, HeldConnection)
    first = runs(1)
    ledger.save_events([e for x in first for e in x.collect_events()], held)
    again = Execution.enqueue(
        spec=first[0].spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key=first[0].trigger_key
    )
    with pytest.raises(IntegrityError):
        ledger.save_events([e for x in [*runs(3), again] for e in x.collect_events()], held)
    later = runs(2)
    ledger.save_events([e for x in later for e in x.collect_events()], held)
    with held.connection() as conn:
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    held.close()
    stored, _ = LogReader(ledger, page_size=100, topics=()).page(0)
    assert [e.originator_id for e in stored] == [first[0].id, *(x.id for x in later)]


def test_a_save_leaves_the_sessions_settings_alone(ledger: Ledger) -> None:
    """If a connection's session has its own lock timeout, then a save on it (which
    sets the recorder's for its own transaction) leaves the session's as it was and no
    transaction open."""
    held = ledger.held_connection()
    assert isinstance(held, HeldConnection)
    with held.connection() as conn:
        conn.execute("SET lock_timeout = '7s'")
    ledger.save_events([e for x in runs(2) for e in x.collect_events()], held)
    with held.connection() as conn:
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SHOW lock_timeout").fetchone() == {"lock_timeout": "7s"}
    held.close()


def test_a_statement_before_the_copy_that_fails_saves_nothing(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a statement of the save's query fails before its COPY starts, then the save
    raises the server's error as eventsourcing's, nothing is saved, and the held
    connection serves the next save."""
    recorder = ledger.recorder
    assert isinstance(recorder, PostgresApplicationRecorder)
    statement = bulk._statement(recorder)
    held = ledger.held_connection()
    assert isinstance(held, HeldConnection)
    monkeypatch.setitem(bulk._STATEMENTS, recorder, b"SELECT 1 / 0; " + statement)
    with pytest.raises(DataError):
        ledger.save_events([e for x in runs(2) for e in x.collect_events()], held)
    monkeypatch.setitem(bulk._STATEMENTS, recorder, statement)
    later = runs(1)
    ledger.save_events([e for x in later for e in x.collect_events()], held)
    held.close()
    stored, _ = LogReader(ledger, page_size=100, topics=()).page(0)
    assert [e.originator_id for e in stored] == [later[0].id]
