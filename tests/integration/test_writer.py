"""The group-commit writer, on SQLite and PostgreSQL."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import psycopg
import pytest
from tests.integration.pool_stats import pool_requests

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import ConflictError
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.infra.errors import WriterClosedError
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger

if TYPE_CHECKING:
    from concurrent.futures import Future

AT = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def new_execution() -> Execution:
    return Execution.enqueue(
        spec=ExecutionSpec(handler="test.echo"),
        ready_at=AT,
        trigger=Trigger.ADHOC,
    )


def leased_copy(ledger: Ledger, execution_id: uuid.UUID) -> Execution:
    copy = ledger.get_execution(execution_id)
    copy.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=AT + timedelta(minutes=1))
    return copy


def busy(writer: GroupCommitWriter) -> GroupCommitWriter:
    """``writer`` once it saved a first item: the items that come within its delay after
    it gather into one batch (a first item after a quiet spell goes alone, at once)."""
    assert writer.submit(new_execution()).result(timeout=10) is None
    return writer


def test_a_conflicting_item_fails_alone_and_the_batch_is_saved(ledger: Ledger) -> None:
    """If one item of a batch conflicts, then every other item is saved and told so."""
    executions = [new_execution() for _ in range(40)]
    ledger.save(*executions)
    # Two leases of the same execution from the same version: the second one must lose.
    winner, loser = leased_copy(ledger, executions[7].id), leased_copy(ledger, executions[7].id)
    ledger.save_all(winner)
    others = [leased_copy(ledger, e.id) for e in executions if e is not executions[7]]
    # A huge delay keeps the batch open, so all 40 items go in one flush.
    with busy(GroupCommitWriter(ledger, max_batch=40, max_delay=5.0)) as writer:
        futures = [writer.submit(a) for a in others[:20]]
        bad = writer.submit(loser)
        futures += [writer.submit(a) for a in others[20:]]
        for future in futures:
            assert future.result(timeout=10) is None
        with pytest.raises(ConflictError):
            bad.result(timeout=10)
        assert writer.stats.conflicts == 1
        assert writer.stats.items == 40
        assert writer.stats.isolation_saves >= 1
    for execution in executions:
        assert ledger.get_execution(execution.id).status is ExecutionStatus.RUNNING


def test_an_item_that_builds_on_a_rejected_item_is_rejected_too(ledger: Ledger) -> None:
    """If an item extends an aggregate whose earlier item was rejected, then it fails too."""
    execution = new_execution()
    ledger.save(execution)
    winner, stale = leased_copy(ledger, execution.id), leased_copy(ledger, execution.id)
    ledger.save_all(winner)
    unrelated = new_execution()
    with busy(GroupCommitWriter(ledger, max_batch=3, max_delay=5.0)) as writer:
        first = writer.submit(stale)
        assert stale.lease_id is not None
        stale.complete(lease_id=stale.lease_id, duration=timedelta(seconds=1), result={})
        second = writer.submit(stale)
        third = writer.submit(unrelated)
        with pytest.raises(ConflictError):
            first.result(timeout=10)
        with pytest.raises(ConflictError):
            second.result(timeout=10)
        assert third.result(timeout=10) is None
    assert ledger.get_execution(execution.id).status is ExecutionStatus.RUNNING
    assert ledger.get_execution(unrelated.id).version == 1


def test_flushes_at_max_batch_and_after_max_delay(ledger: Ledger) -> None:
    """If max_batch items arrive while the writer is busy, then they flush together as
    soon as the batch is full; a lone item flushes on its own."""
    with busy(GroupCommitWriter(ledger, max_batch=10, max_delay=5.0)) as writer:
        futures = [writer.submit(new_execution()) for _ in range(10)]
        for future in futures:
            future.result(timeout=4)  # well before the delay: the full batch flushed
        assert writer.stats.batches == 2
    with GroupCommitWriter(ledger, max_batch=10, max_delay=0.05) as writer:
        writer.submit(new_execution()).result(timeout=4)
        assert writer.stats.batches == 1
        assert writer.stats.items == 1


def test_async_callers_await_their_outcome(ledger: Ledger) -> None:
    """If asyncio tasks save through the writer, then each awaits its own outcome."""

    async def main(writer: GroupCommitWriter) -> list[uuid.UUID]:
        executions = [new_execution() for _ in range(25)]
        await asyncio.gather(*(writer.save_async(e) for e in executions))
        return [e.id for e in executions]

    with GroupCommitWriter(ledger, max_batch=100, max_delay=0.01) as writer:
        ids = asyncio.run(main(writer))
    assert all(ledger.get_execution(i).version == 1 for i in ids)


def test_close_flushes_pending_items_and_refuses_new_ones(ledger: Ledger) -> None:
    """If the writer closes with items queued, then they are saved; later submits fail."""
    writer = GroupCommitWriter(ledger, max_batch=1000, max_delay=60.0)
    futures: list[Future[None]] = [writer.submit(new_execution()) for _ in range(5)]
    writer.close()
    assert all(f.result(timeout=1) is None for f in futures)
    with pytest.raises(WriterClosedError):
        writer.submit(new_execution())


def test_flush_saves_what_is_queued_without_waiting(ledger: Ledger) -> None:
    """If a caller flushes after submitting, then the batch saves at once, not after
    max_delay."""
    with busy(GroupCommitWriter(ledger, max_batch=100, max_delay=30.0)) as writer:
        writer.flush()  # a flush with nothing queued is harmless
        futures = [writer.submit(new_execution()) for _ in range(3)]
        writer.flush()
        for future in futures:
            assert future.result(timeout=5) is None
        assert writer.stats.batches == 2
        assert writer.stats.items == 4


@pytest.mark.postgres
def test_the_writer_keeps_one_connection_for_its_batches(postgres_ledger: Ledger) -> None:
    """If the writer saves batch after batch on PostgreSQL, then it takes a connection
    from the pool (with the pool's check) once and keeps it: no checkout per batch."""
    with GroupCommitWriter(postgres_ledger, max_batch=5, max_delay=0.001) as writer:
        writer.save(new_execution())
        before = pool_requests(postgres_ledger)
        for _ in range(20):
            writer.save(*[new_execution() for _ in range(3)])
        assert writer.stats.batches >= 20
        assert pool_requests(postgres_ledger) == before


@pytest.mark.postgres
def test_a_writer_whose_connection_the_server_ended_saves_on_a_new_one(
    postgres_ledger: Ledger, postgres_url: str
) -> None:
    """If the server ends the writer's connection between two batches, then the next
    batch is saved all the same, on a new connection, and nothing is lost."""
    with GroupCommitWriter(postgres_ledger, max_batch=5, max_delay=0.001) as writer:
        first = new_execution()
        writer.save(first)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert ended is not None
        assert ended[0] >= 1
        later = [new_execution() for _ in range(3)]
        writer.save(*later)
    for execution in [first, *later]:
        assert postgres_ledger.get_execution(execution.id).status is ExecutionStatus.PENDING
