"""The Queue aggregate's rules: pause and resume are idempotent, a reason is required."""

import uuid
from datetime import UTC, datetime

import pytest

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.queue import Queue, queue_id
from jobledger.domain.topics import event_topics

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_id_is_derived_from_the_name() -> None:
    """If two processes register the same queue name, then both get the same id."""
    assert Queue.register("emails").id == Queue.register("emails").id == queue_id("emails")
    assert queue_id("emails") != queue_id("reports")


def test_a_name_no_job_could_use_is_refused() -> None:
    """If the name is not a queue name, then registering it is refused naming the field."""
    with pytest.raises(InvalidDefinitionError) as refused:
        Queue.register("Not A Queue")
    assert refused.value.field == "queue"


def test_pause_records_who_why_and_when() -> None:
    """If a running queue is paused, then it is paused by that operator, for that reason,
    since that time, and one QueuePaused naming the queue is recorded."""
    queue = Queue.register("emails")
    assert queue.pause(by="ada", reason="provider outage", at=AT)
    assert (queue.paused, queue.paused_by, queue.pause_reason) == (True, "ada", "provider outage")
    assert queue.paused_since == AT
    paused = queue.collect_events()[-1]
    assert isinstance(paused, Queue.Paused)
    assert (paused.queue, paused.by, paused.reason, paused.at) == (
        "emails",
        "ada",
        "provider outage",
        AT,
    )


def test_pausing_a_paused_queue_records_nothing() -> None:
    """If a paused queue is paused again, then nothing is recorded and the first pause
    (its operator and reason) stands."""
    queue = Queue.register("emails")
    queue.pause(by="ada", reason="outage", at=AT)
    queue.collect_events()
    assert not queue.pause(by="bob", reason="other", at=AT)
    assert queue.collect_events() == []
    assert queue.paused_by == "ada"


def test_resuming_a_running_queue_records_nothing() -> None:
    """If a queue that runs is resumed, then nothing is recorded."""
    queue = Queue.register("emails")
    queue.collect_events()
    assert not queue.resume(by="ada", at=AT)
    assert queue.collect_events() == []


def test_resume_clears_the_pause() -> None:
    """If a paused queue is resumed, then it runs and holds no pause details."""
    queue = Queue.register("emails")
    queue.pause(by="ada", reason="outage", at=AT)
    assert queue.resume(by="bob", at=AT)
    assert not queue.paused
    assert (queue.paused_by, queue.pause_reason, queue.paused_since) == (None, None, None)


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_pause_or_drain_needs_a_reason(reason: str) -> None:
    """If a pause or a drain gives no reason, then it is refused naming the reason field,
    also when the queue is paused already."""
    queue = Queue.register("emails")
    with pytest.raises(InvalidDefinitionError) as refused:
        queue.pause(by="ada", reason=reason, at=AT)
    assert refused.value.field == "reason"
    with pytest.raises(InvalidDefinitionError):
        queue.drain(by="ada", reason=reason, cancelled=())
    assert not queue.paused
    queue.pause(by="ada", reason="outage", at=AT)
    with pytest.raises(InvalidDefinitionError):
        queue.pause(by="ada", reason=reason, at=AT)


def test_drain_records_what_it_cancelled() -> None:
    """If a queue is drained, then QueueDrained lists the cancelled runs."""
    queue = Queue.register("emails")
    runs = (uuid.uuid4(), uuid.uuid4())
    queue.drain(by="ada", reason="bad deploy", cancelled=runs)
    drained = queue.collect_events()[-1]
    assert isinstance(drained, Queue.Drained)
    assert drained.cancelled == runs
    assert drained.queue == "emails"


def test_topics_are_stable() -> None:
    """If the module moves, then the stored topics stay the ones the log holds."""
    assert event_topics(Queue) == (
        "jobledger:QueueDrained",
        "jobledger:QueuePaused",
        "jobledger:QueueRegistered",
        "jobledger:QueueResumed",
    )
