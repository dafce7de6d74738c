"""The embedded mode: SQLite log, in-memory queue rebuilt from the log at every start."""

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.projection import verify_queue

NOW = datetime.now(tz=UTC)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.02)


def open_ids(container: Container) -> set[uuid.UUID]:
    return {i.execution_id for q in container.queue.queues() for i in container.queue.items(q)}


def test_the_memory_queue_survives_a_restart_through_the_log(tmp_path: Path) -> None:
    """If the embedded process stops and starts, then its queue is rebuilt from the log:
    open executions are back, finished ones are not."""
    settings = load_settings(
        {}, test_handlers="true", data_dir=str(tmp_path), projection_poll_ms="20"
    )
    migrate(settings, progress=lambda _: None)
    executions = [
        Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo", priority=i % 10),
            ready_at=NOW,
            trigger=Trigger.ADHOC,
        )
        for i in range(50)
    ]
    finished = executions[:10]
    for execution in finished:
        lease_id = uuid.uuid4()
        execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=NOW + timedelta(1))
        execution.complete(lease_id=lease_id, duration=timedelta(1), result={})
    with bootstrap(settings) as first:
        assert isinstance(first.queue, MemoryQueue)
        projector = first.projector()
        projector.start()
        first.ledger.save(*executions)
        wait_until(lambda: len(open_ids(first)) == 40)
        wait_until(lambda: projector.checkpoint.position == projector.queue.position)
        projector.stop()
    with bootstrap(settings) as second:
        projector = second.projector()
        projector.start()
        try:
            # The entries show while the rebuild loads them; its position comes last.
            wait_until(lambda: projector.queue.position > 0)
            wait_until(lambda: len(open_ids(second)) == 40)
            assert open_ids(second) == {e.id for e in executions[10:]}
            assert verify_queue(second.reader(), second.queue, scratch=MemoryQueue()) == []
            assert projector.listener is None  # SQLite: followers poll
        finally:
            projector.stop()


def test_an_empty_checkpoint_still_carries_its_position(tmp_path: Path) -> None:
    """If the checkpoint holds no open execution, then reading it still yields its
    position from the same snapshot (a rebuild must not read it a second time)."""
    settings = load_settings({}, test_handlers="true", data_dir=str(tmp_path))
    migrate(settings, progress=lambda _: None)
    with bootstrap(settings) as container:
        container.checkpoint.commit([], 42)
        assert list(container.checkpoint.entries()) == [(42, [])]
