"""The open-executions checkpoint's contract (``projections.queue.checkpoint.Checkpoint``),
run on both stores: ``SqlCheckpoint`` on SQLite, ``PostgresCheckpoint`` (its rebuild
reads by binary COPY) on PostgreSQL."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from jobledger.adapters.postgres.checkpoint import PostgresCheckpoint
from jobledger.adapters.sql.checkpoint import SqlCheckpoint
from jobledger.infra.settings import Settings
from jobledger.projections.database import Database
from jobledger.projections.queue.backend import (
    NamedLimit,
    QueueChange,
    QueueItem,
    QueuePause,
    QueueState,
    WorkSpec,
    encode_spec,
)
from jobledger.projections.queue.checkpoint import Checkpoint
from jobledger.projections.queue.entries import decode_item

AT = datetime(2026, 12, 7, 12, 0, 0, 123_000, tzinfo=UTC)


@pytest.fixture
def checkpoint(module_store: Settings, module_database: Database) -> Checkpoint:
    """An empty checkpoint at position 0 (the module's store is shared: cleared first)."""
    made: Checkpoint = (
        PostgresCheckpoint(module_database)
        if module_store.uses_postgres
        else SqlCheckpoint(module_database)
    )
    made.clear()
    return made


def item(
    *,
    queue: str = "default",
    version: int = 1,
    state: QueueState = QueueState.PENDING,
    job_id: uuid.UUID | None = None,
    execution_id: uuid.UUID | None = None,
) -> QueueItem:
    spec = WorkSpec(
        job_id=job_id,
        handler="test.echo",
        payload={"n": version, "text": "ünïcode"},
        timeout=timedelta(seconds=30),
        max_attempts=3,
    )
    leased = state is QueueState.LEASED
    return QueueItem(
        execution_id=execution_id or uuid.uuid4(),
        queue=queue,
        priority=3,
        version=version,
        state=state,
        at=AT + timedelta(seconds=version),
        attempt=1,
        lease_id=uuid.uuid4() if leased else None,
        leased_at=AT if leased else None,
        spec=encode_spec(spec),
    )


def entries(checkpoint: Checkpoint, batch: int = 1000) -> tuple[int, list[QueueItem]]:
    """The position and every entry, decoded, in id order."""
    batches = list(checkpoint.entries(batch))
    found = [decode_item(entry[-1]) for _, chunk in batches for entry in chunk]
    return batches[-1][0], sorted(found, key=lambda i: str(i.execution_id))


def test_committed_entries_read_back_field_for_field_with_the_position(
    checkpoint: Checkpoint,
) -> None:
    """If entries are committed with a position, then the rebuild's read gives each one
    back equal, with that position, and ``load`` gives each by id."""
    made = [item(), item(state=QueueState.LEASED, queue="mail"), item(state=QueueState.DEAD)]
    checkpoint.commit([QueueChange.put(i) for i in made], 42)
    assert checkpoint.position() == 42
    assert entries(checkpoint) == (42, sorted(made, key=lambda i: str(i.execution_id)))
    for each in made:
        assert checkpoint.load(each.execution_id) == each
    assert checkpoint.load(uuid.uuid4()) is None


def test_an_older_version_never_replaces_a_newer_and_a_removal_leaves_nothing(
    checkpoint: Checkpoint,
) -> None:
    """If a change of an older version comes after a newer one, then the newer stays;
    if an entry is removed at a later version, then it is gone, and a position of None
    leaves the position as it was."""
    run = uuid.uuid4()
    newer = item(execution_id=run, version=3, state=QueueState.LEASED)
    checkpoint.commit([QueueChange.put(newer)], 5)
    checkpoint.commit([QueueChange.put(item(execution_id=run, version=2))], None)
    assert checkpoint.load(run) == newer
    assert checkpoint.position() == 5
    checkpoint.commit([QueueChange(execution_id=run, queue="default", version=4, item=None)], 6)
    assert checkpoint.load(run) is None
    assert entries(checkpoint) == (6, [])


def test_the_rebuild_read_comes_in_batches_of_the_size_asked(checkpoint: Checkpoint) -> None:
    """If there are more entries than a batch holds, then they come in batches of that
    size at most, every one once; an empty checkpoint gives one empty batch."""
    assert list(checkpoint.entries(2)) == [(0, [])]
    made = [item() for _ in range(5)]
    checkpoint.commit([QueueChange.put(i) for i in made], 9)
    batches = list(checkpoint.entries(2))
    assert [len(chunk) for _, chunk in batches] == [2, 2, 1]
    assert {position for position, _ in batches} == {9}
    assert sorted(entry[0] for _, chunk in batches for entry in chunk) == sorted(
        str(i.execution_id) for i in made
    )


def test_pending_runs_and_each_jobs_open_runs_are_found(checkpoint: Checkpoint) -> None:
    """If runs are open on queues and jobs, then ``pending_in`` lists the pending ones
    of one queue by id, and ``open_runs_of`` each asked job's open runs with states."""
    job, other = uuid.uuid4(), uuid.uuid4()
    pending = [item(job_id=job), item(job_id=job)]
    leased = item(job_id=job, state=QueueState.LEASED)
    elsewhere = item(queue="mail", job_id=other)
    checkpoint.commit([QueueChange.put(i) for i in [*pending, leased, elsewhere]], 1)
    assert checkpoint.pending_in("default") == sorted(i.execution_id for i in pending)
    assert checkpoint.pending_in("nowhere") == []
    runs = checkpoint.open_runs_of([job, uuid.uuid4()])
    assert set(runs) == {job}
    assert sorted(runs[job]) == sorted(
        [(i.execution_id, QueueState.PENDING) for i in pending]
        + [(leased.execution_id, QueueState.LEASED)]
    )
    assert checkpoint.open_runs_of([]) == {}


def test_pauses_and_limits_keep_their_newest_version(checkpoint: Checkpoint) -> None:
    """If pause and limit records of several versions are committed, in one commit or
    in several, then each queue's and each limit's newest stays."""
    paused = QueuePause(queue="mail", version=2, paused=True, by="ops", reason="x", since=AT)
    limit = NamedLimit(name="api", version=3, concurrency=2)
    checkpoint.commit(
        [],
        1,
        pauses=[QueuePause(queue="mail", version=1, paused=False), paused],
        limits=[limit, NamedLimit(name="api", version=1, rate=5, rate_per_ms=1000)],
    )
    checkpoint.commit([], 2, pauses=[QueuePause(queue="mail", version=1, paused=False)], limits=[])
    assert checkpoint.pauses() == [paused]
    assert checkpoint.limits() == [limit]
    checkpoint.clear()
    assert (checkpoint.pauses(), checkpoint.limits(), checkpoint.position()) == ([], [], 0)
