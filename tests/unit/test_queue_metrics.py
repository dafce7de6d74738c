"""The queue gauges (depth per state, 1/0 per queue for a pause), and labelled children."""

import uuid
from datetime import UTC, datetime

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.infra.metrics import Metrics
from jobledger.projections.queue.backend import (
    QueueChange,
    QueueItem,
    QueueMeta,
    QueuePause,
    QueueState,
)
from jobledger.projections.queue.gauges import observe_queue

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_the_paused_gauge_follows_the_pause_record() -> None:
    """If one queue is paused and another is not (or was resumed), then the paused gauge
    is 1 for the first and 0 for the others, and follows a resume."""
    queue = MemoryQueue(clock=lambda: AT)
    queue.reset(QueueMeta(store_id="s", epoch="e", position=0))
    item = QueueItem(
        execution_id=uuid.uuid4(),
        queue="free",
        priority=5,
        version=1,
        state=QueueState.PENDING,
        at=AT,
        attempt=1,
    )
    queue.apply([QueueChange.put(item)], epoch="e")
    queue.apply_pauses([QueuePause(queue="held", version=2, paused=True, by="ada")], epoch="e")
    metrics = Metrics()
    value = metrics.registry.get_sample_value
    observe_queue(metrics, queue, now=AT, head=0)
    assert value("jobledger_queue_paused", {"queue": "held"}) == 1
    assert value("jobledger_queue_paused", {"queue": "free"}) == 0
    queue.apply_pauses([QueuePause(queue="held", version=3, paused=False)], epoch="e")
    observe_queue(metrics, queue, now=AT, head=0)
    assert value("jobledger_queue_paused", {"queue": "held"}) == 0


def test_a_labelled_child_is_kept_and_counts_in_its_own_series() -> None:
    """If the same metric and values are asked for twice, then the same child comes
    back, and what it counts shows under those labels only."""
    metrics = Metrics()
    done = metrics.labelled(metrics.completions, "test.echo", "completed")
    assert metrics.labelled(metrics.completions, "test.echo", "completed") is done
    done.inc()
    metrics.labelled(metrics.completions, "test.echo", "retried").inc(2)
    sample = metrics.registry.get_sample_value
    name = "jobledger_completions_total"
    assert sample(name, {"handler": "test.echo", "outcome": "completed"}) == 1.0
    assert sample(name, {"handler": "test.echo", "outcome": "retried"}) == 2.0
