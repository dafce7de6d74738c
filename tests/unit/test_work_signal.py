"""Which queues a page of queue changes rings (``ready_queues``)."""

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobledger.projections.queue.backend import QueueChange, QueueItem, QueueState
from jobledger.projections.queue.signal import ready_queues

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


def put(queue: str, state: QueueState, at: datetime) -> QueueChange:
    item = QueueItem(
        execution_id=uuid.uuid4(), queue=queue, priority=5, version=1, state=state, at=at, attempt=1
    )
    return QueueChange.put(item)


def removed(queue: str) -> QueueChange:
    return QueueChange(execution_id=uuid.uuid4(), queue=queue, version=3, item=None)


@pytest.mark.parametrize(
    ("change", "rings"),
    [
        (put("mail", QueueState.PENDING, NOW), True),
        (put("mail", QueueState.PENDING, NOW - timedelta(hours=1)), True),
        # The same instant in another zone is as ready.
        (put("mail", QueueState.PENDING, NOW.astimezone(BERLIN)), True),
        (put("mail", QueueState.PENDING, NOW + timedelta(milliseconds=1)), False),
        (put("mail", QueueState.LEASED, NOW), False),
        (put("mail", QueueState.DEAD, NOW), False),
        (removed("mail"), False),
    ],
)
def test_only_a_run_ready_now_rings_its_queue(change: QueueChange, rings: bool) -> None:
    """If a change puts a pending run that is ready at ``now``, then its queue rings;
    a run due later, leased, dead or removed rings nothing."""
    assert ready_queues([change], NOW) == ({"mail"} if rings else set())


def test_each_queue_rings_once_whatever_its_runs() -> None:
    """If a page makes several runs ready on two queues, then each queue rings once."""
    changes = [
        put("mail", QueueState.PENDING, NOW),
        put("mail", QueueState.PENDING, NOW),
        put("reports", QueueState.PENDING, NOW),
        put("later", QueueState.PENDING, NOW + timedelta(days=1)),
    ]
    assert ready_queues(changes, NOW) == {"mail", "reports"}
