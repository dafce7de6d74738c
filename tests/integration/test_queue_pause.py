"""Queue pause and drain on PostgreSQL and a private Redis, with real worker processes:
what the log records is what the queue enforces, also after Redis loses its data."""

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import redis
from structlog.testing import capture_logs
from tests.conftest import actor

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.redis.keys import Keys
from jobledger.bootstrap import build_services
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.queue import Queue, queue_id
from jobledger.domain.roles import Role
from jobledger.projections.queue.projection import verify_queue
from jobledger.services.actors import Actor
from jobledger.services.errors import NotPermittedError
from jobledger.services.executions import Executions

if TYPE_CHECKING:
    from tests.integration.conftest import Harness

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

HELD, FREE = "held", "free"
OPERATOR = Actor("ada", Role.OPERATOR)


def run_in(harness: "Harness", queue: str, handler: str = "test.echo", **payload: Any) -> Execution:
    spec = ExecutionSpec(handler=handler, payload=payload, queue=queue)
    return Executions(harness.container.ledger).run(
        spec, key=uuid.uuid4().hex, at=datetime.now(UTC), by=actor()
    )


def now() -> datetime:
    return datetime.now(UTC)


def projected_pause(harness: "Harness", queue: str) -> bool:
    pause = harness.container.queue.pauses().get(queue)
    return pause is not None and pause.paused


def queue_caught_up(harness: "Harness") -> bool:
    """The queue's recorded position has reached the log's head: verify folds the log up
    to that position, so a pause the queue got from a rebuild counts only then."""
    meta = harness.container.queue.read_meta()
    return meta is not None and meta.position >= harness.container.head()


@contextlib.contextmanager
def harness_redis(harness: "Harness") -> Iterator[redis.Redis]:
    """A client on the harness's Redis that, unlike ``redis_client``, does not flush it
    (a flush after the harness started would make its projector rebuild meanwhile)."""
    client = redis.Redis.from_url(harness.container.settings.redis_url)
    try:
        yield client
    finally:
        client.close()


def leases_of(harness: "Harness", execution: Execution) -> list[Any]:
    return [e for e in harness.events(execution.id) if isinstance(e, Execution.Leased)]


def queues_leased_between(harness: "Harness", start: int, stop: int) -> list[str]:
    """The queue of every ExecutionLeased the log holds after ``start`` up to ``stop``."""
    reader = harness.container.reader(topics=[Execution.Leased.TOPIC])
    ledger = harness.container.ledger
    queues: list[str] = []
    position = start
    while (page := reader.rows(position, stop)).position != position:
        queues += [
            ledger.get_execution(e.originator_id).spec.queue for e in reader.events(page.rows)
        ]
        position = page.position
    return queues


def test_a_paused_queue_leases_nothing_under_load_while_another_flows(
    harness: "Harness",
) -> None:
    """If a queue is paused while a worker runs one of its runs and more runs arrive in
    it and in another queue, then the running one completes, the other queue's runs all
    complete, and from the moment the pause was projected until the resume the log holds
    an ExecutionLeased for each of the other queue's runs and none for the paused
    queue's; after the resume they lease and complete."""
    services = build_services(harness.container)
    harness.start_worker(worker_queues=f"{HELD},{FREE}", worker_slots="4")
    running = run_in(harness, HELD, "test.delay", seconds=1.5)
    harness.wait_for_all([running], ExecutionStatus.RUNNING, 30)
    services.queues.pause(HELD, reason="provider outage", at=now(), by=OPERATOR)
    harness.wait_for(lambda: projected_pause(harness, HELD), 10)
    projected = harness.container.head()
    held: list[Execution] = []
    free: list[Execution] = []
    for _ in range(5):  # the load arrives in waves, while the worker polls
        held += [run_in(harness, HELD) for _ in range(6)]
        free += [run_in(harness, FREE) for _ in range(6)]
        harness.wait_for_all(free, ExecutionStatus.COMPLETED, 30)
    harness.wait_for_all([running], ExecutionStatus.COMPLETED, 30)
    assert [leases_of(harness, e) for e in held] == [[] for _ in held]
    assert {harness.status(e.id) for e in held} == {ExecutionStatus.PENDING}
    leased = queues_leased_between(harness, projected, harness.container.head())
    assert set(leased) == {FREE}
    assert len(leased) == len(free)
    resumed_at = harness.container.head()
    assert services.queues.resume(HELD, at=now(), by=OPERATOR).changed
    harness.wait_for_all(held, ExecutionStatus.COMPLETED, 30)
    assert set(queues_leased_between(harness, resumed_at, harness.container.head())) == {HELD}


def test_a_drain_cancels_exactly_what_its_dry_run_listed(harness: "Harness") -> None:
    """If a paused queue holds a running run, ready runs and a delayed run, then the dry
    run lists the pending ones (not the running one), the drain cancels exactly those
    and records QueueDrained with them, and the running one completes."""
    services = build_services(harness.container)
    harness.start_worker(worker_queues=HELD, worker_slots="1")
    running = run_in(harness, HELD, "test.delay", seconds=1.5)
    harness.wait_for_all([running], ExecutionStatus.RUNNING, 30)
    services.queues.pause(HELD, reason="bad deploy", at=now(), by=OPERATOR)
    harness.wait_for(lambda: projected_pause(harness, HELD), 10)
    pending = [run_in(harness, HELD) for _ in range(5)]
    later = ExecutionSpec(handler="test.echo", queue=HELD)
    delayed = Executions(harness.container.ledger).run(
        later, key="later", at=now(), by=actor(), ready_at=now() + timedelta(hours=1)
    )
    pending.append(delayed)
    checkpoint = harness.container.checkpoint
    harness.wait_for(lambda: len(checkpoint.pending_in(HELD)) == len(pending), 10)
    dry = services.queues.drain(HELD, reason="bad deploy", at=now(), by=OPERATOR, dry_run=True)
    assert sorted(dry.cancelled) == sorted(e.id for e in pending)
    assert {harness.status(e.id) for e in pending} == {ExecutionStatus.PENDING}
    done = services.queues.drain(HELD, reason="bad deploy", at=now(), by=OPERATOR)
    assert done.cancelled == dry.cancelled
    assert {harness.status(e.id) for e in pending} == {ExecutionStatus.CANCELLED}
    drained = harness.container.ledger.history(queue_id(HELD))
    (record,) = [e for e in drained if isinstance(e, Queue.Drained)]
    assert (record.by, record.reason, list(record.cancelled)) == (
        "ada",
        "bad deploy",
        dry.cancelled,
    )
    harness.wait_for_all([running], ExecutionStatus.COMPLETED, 30)


def test_a_viewer_cannot_steer_a_queue(harness: "Harness") -> None:
    """If a viewer asks to pause, resume or drain, then it is refused and the log has not
    moved; the viewer may still list the queues."""
    services = build_services(harness.container)
    viewer = Actor("vic", Role.VIEWER)
    head = harness.container.head()
    with pytest.raises(NotPermittedError, match="operator"):
        services.queues.pause(HELD, reason="x", at=now(), by=viewer)
    with pytest.raises(NotPermittedError):
        services.queues.resume(HELD, at=now(), by=viewer)
    with pytest.raises(NotPermittedError):
        services.queues.drain(HELD, reason="x", at=now(), by=viewer, dry_run=True)
    assert harness.container.head() == head
    assert services.queues.overview(at=now(), by=viewer) == []


def test_a_pause_survives_a_flushall_and_is_still_enforced(harness: "Harness") -> None:
    """If Redis loses everything while a queue is paused, then the projection rebuilds
    the pause from the log (through the checkpoint) with the queue, verify finds no
    difference, and a worker still leases nothing from it while the other queue runs."""
    services = build_services(harness.container)
    services.queues.pause(HELD, reason="maintenance", at=now(), by=OPERATOR)
    waiting = run_in(harness, HELD)
    harness.wait_for(lambda: projected_pause(harness, HELD), 10)
    harness.wait_for(lambda: len(harness.container.checkpoint.pending_in(HELD)) == 1, 10)
    with harness_redis(harness) as client:
        client.flushall()
    harness.wait_for(lambda: projected_pause(harness, HELD) and queue_caught_up(harness), 15)
    assert (
        verify_queue(harness.container.reader(), harness.container.queue, scratch=MemoryQueue())
        == []
    )
    harness.start_worker(worker_queues=f"{HELD},{FREE}")
    free = [run_in(harness, FREE) for _ in range(5)]
    harness.wait_for_all(free, ExecutionStatus.COMPLETED, 30)
    assert leases_of(harness, waiting) == []
    (listed,) = [q for q in services.queues.overview(at=now(), by=OPERATOR) if q.name == HELD]
    assert (listed.paused, listed.paused_by, listed.pause_reason, listed.ready) == (
        True,
        "ada",
        "maintenance",
        1,
    )


def test_verify_reports_a_pause_flag_that_differs_from_the_log(harness: "Harness") -> None:
    """If the paused flag in Redis is changed behind the log's back, then verify names
    the queue, and a rebuild restores the flag the log says."""
    services = build_services(harness.container)
    services.queues.pause(HELD, reason="maintenance", at=now(), by=OPERATOR)
    harness.wait_for(lambda: projected_pause(harness, HELD) and queue_caught_up(harness), 10)
    container = harness.container
    paused_key = Keys(container.settings.redis_prefix).queue(HELD).paused
    with harness_redis(harness) as client:
        client.hset(paused_key, "paused", "0")
        differences = verify_queue(container.reader(), container.queue, scratch=MemoryQueue())
        assert differences == [f"{HELD}: paused is no, the log says yes (by ada: maintenance)"]
        services.admin.rebuild_queue(full=True, by=Actor("root", Role.ADMIN), via="test")
        # The rebuild runs in the background: the queue is empty until it ends.
        harness.wait_for(
            lambda: verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == [],
            30,
        )
        assert client.hget(paused_key, "paused") == b"1"


def test_each_change_is_logged_under_a_stable_name(harness: "Harness") -> None:
    """If a queue is paused, paused again, resumed and drained, then each step logs its
    stable event with the queue, who acted and whether anything changed."""
    services = build_services(harness.container)
    with capture_logs() as logs:
        services.queues.pause(HELD, reason="outage", at=now(), by=OPERATOR)
        services.queues.pause(HELD, reason="outage", at=now(), by=OPERATOR)
        services.queues.resume(HELD, at=now(), by=OPERATOR)
        services.queues.drain(HELD, reason="stale", at=now(), by=OPERATOR)
    steps = [
        (e["event"], e["queue"], e["by"], e.get("changed", e.get("cancelled")))
        for e in logs
        # The harness's projector logs too (queue.rebuilt, ...): only these three count.
        if e["event"] in {"queue.paused", "queue.resumed", "queue.drained"}
    ]
    assert steps == [
        ("queue.paused", HELD, "ada", True),
        ("queue.paused", HELD, "ada", False),
        ("queue.resumed", HELD, "ada", True),
        ("queue.drained", HELD, "ada", 0),
    ]
