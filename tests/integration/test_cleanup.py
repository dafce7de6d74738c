"""system.cleanup prunes what only finished executions needed; the log stays whole."""

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from eventsourcing.domain import CanCreateTimestamp

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.sql.read_model_queries import SqlReadModelQueries
from jobledger.adapters.sql.read_models import SqlReadModelTables
from jobledger.adapters.store import projection_database
from jobledger.bootstrap import read_models_on
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.domain.policies import RetryPolicy
from jobledger.infra.settings import Settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.database import Database
from jobledger.projections.queue.backend import QueueChange, QueueItem, QueueMeta, QueueState
from jobledger.runtime.handlers.base import Handler, HandlerContext, HandlerError
from jobledger.runtime.handlers.cleanup import make_cleanup_handler

NOW = datetime.now(tz=UTC)


def context(**payload: object) -> HandlerContext:
    return HandlerContext(
        execution_id=uuid.uuid4(), job_id=None, attempt=1, lease_deadline=NOW, payload=payload
    )


def call(handler: Handler, ctx: HandlerContext) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        return await handler(ctx)

    return asyncio.run(run())


def finish(queue: MemoryQueue, clock: list[datetime], *, ago: timedelta) -> None:
    """An execution enqueued and finished ``ago``: it leaves a tombstone dated then."""
    item = QueueItem(
        execution_id=uuid.uuid4(),
        queue="default",
        priority=5,
        version=1,
        state=QueueState.PENDING,
        at=NOW,
        attempt=1,
    )
    queue.apply([QueueChange.put(item)], epoch="e")
    clock[0] = NOW - ago
    removal = QueueChange(execution_id=item.execution_id, queue="default", version=2, item=None)
    queue.apply([removal], epoch="e")
    clock[0] = NOW


def test_cleanup_prunes_old_tombstones_only() -> None:
    """If executions finished before the retention, then their tombstones are pruned;
    newer ones stay."""
    clock = [NOW]
    queue = MemoryQueue(clock=lambda: clock[0])
    queue.reset(QueueMeta(store_id="s", epoch="e", position=0))
    finish(queue, clock, ago=timedelta(hours=48))
    finish(queue, clock, ago=timedelta(0))
    handler = make_cleanup_handler(queue)
    result = call(handler, context(retention_hours=24))
    assert result["tombstones_pruned"] == {"default": 1}
    assert call(handler, context(retention_hours=24))["tombstones_pruned"] == {"default": 0}


def test_cleanup_refuses_a_bad_retention() -> None:
    """If the retention is not a number of hours, then the attempt fails with a clear
    message."""
    queue = MemoryQueue()
    handler = make_cleanup_handler(queue)
    with pytest.raises(HandlerError, match="retention_hours"):
        call(handler, context(retention_hours="soon"))


@pytest.fixture
def database(store_settings: Settings) -> Iterator[Database]:
    database = projection_database(store_settings)
    yield database
    database.close()


def run(
    ledger: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    *,
    at: datetime,
    end: str,
    ended: datetime | None = None,
) -> uuid.UUID:
    """An execution enqueued at ``at`` whose other events happen at ``ended`` (``at`` if
    not given), ending as ``end`` says."""
    with monkeypatch.context() as patch:
        patch.setattr(CanCreateTimestamp, "create_timestamp", staticmethod(lambda: at))
        spec = ExecutionSpec(handler="test.echo", retry=RetryPolicy(max_retries=0))
        execution = Execution.enqueue(spec=spec, ready_at=at, trigger=Trigger.ADHOC)
        finished = at if ended is None else ended
        patch.setattr(CanCreateTimestamp, "create_timestamp", staticmethod(lambda: finished))
        lease_id = uuid.uuid4()
        if end != "pending":
            execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=at)
        if end == "completed":
            execution.complete(lease_id=lease_id, duration=timedelta(seconds=1), result={})
        elif end == "dead":
            execution.fail(lease_id=lease_id, error="boom", at=at)
        elif end == "cancelled":
            execution.cancel(by="ops", reason="not needed")
        ledger.save_all(execution)
    return execution.id


def test_cleanup_prunes_old_finished_executions_from_the_read_models(
    ledger: Ledger, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If executions were completed or cancelled before the retention, then their rows
    and attempts leave the read models, however long before they were enqueued; dead
    letters, open executions and those finished since stay (one enqueued long before),
    and the log keeps every event."""
    old, older = NOW - timedelta(hours=48), NOW - timedelta(hours=72)
    pruned = [run(ledger, monkeypatch, at=old, end=end) for end in ("completed", "cancelled")]
    pruned.append(run(ledger, monkeypatch, at=older, ended=old, end="completed"))
    kept = [run(ledger, monkeypatch, at=old, end=end) for end in ("dead", "pending")]
    kept.append(run(ledger, monkeypatch, at=NOW, end="completed"))
    kept.append(run(ledger, monkeypatch, at=older, ended=NOW, end="completed"))
    read_models_on(ledger, database).rebuild()
    events = ledger.recorder.max_notification_id()
    handler = make_cleanup_handler(MemoryQueue(), SqlReadModelTables(database))
    assert call(handler, context(retention_hours=24))["executions_pruned"] == 3
    queries = SqlReadModelQueries(database)
    assert {row.id for row in queries.list_executions().items} == set(kept)
    assert queries.list_attempts(pruned[0]) == []
    counts = queries.status_counts()["executions"]
    assert (counts["completed"], counts["cancelled"], counts["dead_lettered"]) == (2, 0, 1)
    assert ledger.get_execution(pruned[0]).status is ExecutionStatus.COMPLETED
    assert ledger.recorder.max_notification_id() == events
    assert call(handler, context(retention_hours=24))["executions_pruned"] == 0
