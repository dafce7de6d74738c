"""system.cleanup prunes what only finished executions needed; the log stays whole."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobledger.projections.memory_queue import MemoryQueue
from jobledger.projections.queue import QueueChange, QueueItem, QueueMeta, QueueState
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
