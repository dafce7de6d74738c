"""A bad event never stops a projection: isolated, recorded, reported, retried.

The events are written straight into the event store (as an older release, a restore
or a bug elsewhere could have written them), not through the API, which refuses such
payloads at its boundary.
"""

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from eventsourcing.persistence import StoredEvent
from tests.integration.test_queue_projection import run_cli

from jobledger.bootstrap import Container
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.roles import Role
from jobledger.persistence.ledger import Ledger
from jobledger.projections.quarantine import (
    CHECKPOINT_FOLLOWER,
    QUEUE_FOLLOWER,
    READ_MODELS_FOLLOWER,
    QuarantinedEvent,
)
from jobledger.projections.queue import backend as queue
from jobledger.projections.queue import fold as queue_fold
from jobledger.projections.queue.backend import WorkSpec
from jobledger.projections.read_models import tables as read_model_tables

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

BIG = 1208925819614629174706176  # 2**80: JSON carries it, the queue's msgpack cannot
POISON = {"poison": True}  # a payload the fault below refuses while it is on
# A poisoned run's queue: the read models' fold reads its spec, not its payload.
POISON_QUEUE = "poisoned"


def enqueue(ledger: Ledger, payload: dict[str, Any]) -> uuid.UUID:
    execution = Execution.enqueue(
        spec=ExecutionSpec(
            handler="test.echo",
            payload=payload,
            queue=POISON_QUEUE if payload == POISON else "default",
        ),
        ready_at=datetime.now(tz=UTC),
        trigger=Trigger.ADHOC,
    )
    ledger.save(execution)
    return execution.id


def enqueue_raw_big_int(ledger: Ledger) -> uuid.UUID:
    """An ExecutionEnqueued whose payload holds 2**80, stored byte for byte."""
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.echo", payload={"big": 7}),
        ready_at=datetime.now(tz=UTC),
        trigger=Trigger.ADHOC,
    )
    [event] = execution.collect_events()
    stored = ledger.mapper.to_stored_event(event)
    state = stored.state.replace(b'{"big":7}', b'{"big":%d}' % BIG)
    assert state != stored.state
    ledger.recorder.insert_events(
        [
            StoredEvent(
                originator_id=stored.originator_id,
                originator_version=stored.originator_version,
                topic=stored.topic,
                state=state,
            )
        ]
    )
    return execution.id


class Fault:
    """A projection-level fault: while on, the queue fold and the read models cannot
    apply an execution whose payload is POISON, on its queue of its own (a stand-in
    for a bug fixed later)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = True
        encode_spec, enqueued_row = queue.encode_spec, read_model_tables._enqueued_row

        def faulty_spec(spec: WorkSpec) -> bytes:
            if self.on and spec.payload == POISON:
                raise ValueError("poisoned payload")
            return encode_spec(spec)

        def faulty_row(key: str, event: Execution.Enqueued) -> dict[str, Any]:
            if self.on and event.spec.queue == POISON_QUEUE:
                raise ValueError("poisoned payload")
            return enqueued_row(key, event)

        monkeypatch.setattr(queue_fold, "encode_spec", faulty_spec)
        monkeypatch.setattr(read_model_tables, "_enqueued_row", faulty_row)


def in_queue(container: Container) -> set[uuid.UUID]:
    return {
        item.execution_id
        for name in container.queue.queues()
        for item in container.queue.items(name)
    }


def in_read_models(container: Container) -> set[uuid.UUID]:
    with container.database.transaction(snapshot=True) as cursor:
        cursor.execute("SELECT id FROM jobledger_rm_executions")
        return {uuid.UUID(r[0]) for r in cursor.fetchmany(10_000)}


def quarantined(container: Container) -> set[tuple[str, uuid.UUID, int]]:
    return {
        (e.follower, uuid.UUID(e.originator_id), e.originator_version)
        for e in container.quarantine().events()
    }


def cli(api: "Api", *args: str) -> tuple[int, str]:
    """The command in a process of its own (without the test's fault)."""
    done = run_cli(api.container, *args)
    return done.returncode, done.stdout


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Fault:
    return Fault(monkeypatch)


def assert_reported(api: "Api", position: int, count: int) -> None:
    """/ready, both verifies and the system page name the quarantined events."""
    ready = api.client().get("/ready")
    assert ready.status_code == 200
    assert ready.json()["degraded"] is True
    assert ready.json()["quarantined"] == count
    code, out = cli(api, "queue", "verify")
    assert code == 1
    assert "the queue matches the log" not in out
    assert f"position {position}" in out
    verify = api.client(Role.ADMIN).get("/api/v1/admin/queue/verify").json()
    assert verify["ok"] is False
    assert verify["differences"] == []
    assert any(f"position {position} " in line for line in verify["quarantined"])
    page = api.session("admin").get("/ui/system")
    assert page.status_code == 200
    assert "Quarantined events" in page.text
    assert f"<td>{position}</td>" in page.text


def assert_dropped_is_clean(api: "Api", left: list[QuarantinedEvent]) -> None:
    """Dropping the first event of each follower's stream drops the rest with it, and
    then nothing is degraded and verify is clean."""
    first_ids = [str(e.id) for e in left if e.originator_version == 1]
    drop = ["--id", first_ids[0], "--id", first_ids[1], "--by", "ops", "--reason", "2**80"]
    code, out = cli(api, "projections", "quarantine", "drop", *drop)
    assert code == 0
    assert out.count("dropped: ") == len(left)
    assert api.container.quarantine().count() == 0
    assert api.client().get("/ready").json()["degraded"] is False
    code, out = cli(api, "queue", "verify")
    assert (code, out.splitlines()[-1]) == (0, "the queue matches the log (but for dropped events)")


def test_a_bad_event_is_quarantined_and_the_followers_go_on(api: "Api", fault: Fault) -> None:
    """If an event cannot be applied, then every follower records it in quarantine,
    counts it and goes on: later executions reach the queue (and can be leased) and the
    read models; /ready says degraded with the count, verify does not claim a match,
    the system page lists it; once its cause is gone, a retry applies it; an event no
    release can apply is dropped by the operator, and all is clean again."""
    container = api.container
    ledger = container.ledger
    first = enqueue(ledger, {"n": 1})
    big = enqueue_raw_big_int(ledger)
    poisoned = enqueue(ledger, POISON)
    # A later event of the bad stream: applied on a missing enqueue it would corrupt.
    held: Execution = ledger.repository.get(big)
    held.cancel(by="operator", reason="bad payload")
    ledger.save(held)
    later = enqueue(ledger, {"n": 2})

    api.wait_for(lambda: {first, later} <= in_queue(container))
    api.wait_for(lambda: {first, later, big} <= in_read_models(container))
    expected = {
        (QUEUE_FOLLOWER, big, 1),
        (QUEUE_FOLLOWER, big, 2),
        (CHECKPOINT_FOLLOWER, big, 1),
        (CHECKPOINT_FOLLOWER, big, 2),
        (QUEUE_FOLLOWER, poisoned, 1),
        (CHECKPOINT_FOLLOWER, poisoned, 1),
        (READ_MODELS_FOLLOWER, poisoned, 1),
    }
    api.wait_for(lambda: quarantined(container) == expected)
    assert big not in in_queue(container)
    assert poisoned not in in_queue(container) | in_read_models(container)
    [big_row] = [
        e
        for e in container.quarantine().events(follower=QUEUE_FOLLOWER)
        if e.originator_version == 1 and e.originator_id == str(big)
    ]
    assert "can't serialize ints" in big_row.error

    registry = container.metrics.registry

    def counted(follower: str) -> float:
        name = "jobledger_projection_quarantined_total"
        return registry.get_sample_value(name, {"follower": follower}) or 0.0

    # Counted just after each row is recorded: big, its held cancel, poisoned.
    api.wait_for(lambda: counted(QUEUE_FOLLOWER) == counted(CHECKPOINT_FOLLOWER) == 3)
    assert counted(READ_MODELS_FOLLOWER) == 1

    def waiting(follower: str) -> float | None:
        name = "jobledger_projection_quarantined_events"
        return registry.get_sample_value(name, {"follower": follower})

    api.wait_for(lambda: waiting(QUEUE_FOLLOWER) == 3)  # the gauge the alert reads
    assert_reported(api, big_row.position, len(expected))
    code, out = cli(api, "queue", "rebuild", "--full")
    assert code == 0
    assert "3 event(s) quarantined in queue-projection" in out.splitlines()[-1]
    api.wait_for(lambda: {first, later} <= in_queue(container))
    assert big not in in_queue(container)

    fault.on = False  # the cause of the poisoned event is gone
    code, out = cli(api, "projections", "quarantine", "retry", "--all")
    assert code == 1  # the 2**80 event still cannot be applied
    assert "3 applied, 2 failed again, 2 waiting" in out
    assert poisoned in in_queue(container)
    assert poisoned in in_read_models(container)
    left = container.quarantine().events()
    assert {(e.follower, uuid.UUID(e.originator_id)) for e in left} == {
        (QUEUE_FOLLOWER, big),
        (CHECKPOINT_FOLLOWER, big),
    }
    # Seen by the follower, the full rebuild (the queue only) and the retry.
    assert {(e.follower, e.attempts) for e in left if e.originator_version == 1} == {
        (QUEUE_FOLLOWER, 3),
        (CHECKPOINT_FOLLOWER, 2),
    }
    api.wait_for(lambda: waiting(QUEUE_FOLLOWER) == 2 and waiting(READ_MODELS_FOLLOWER) == 0)
    code, out = cli(api, "projections", "quarantine", "list", "--json")
    assert code == 0
    assert str(big) in out

    # No release can carry 2**80 in the queue: the operator gives up on it.
    assert_dropped_is_clean(api, left)
    assert big not in in_queue(container)

    # Every good execution is runnable: the queue leases them, not the bad one.
    leases = [
        lease
        for name in ("default", POISON_QUEUE)
        for lease in container.queue.lease(
            name,
            lease_ids=[uuid.uuid4() for _ in range(10)],
            ttl=timedelta(minutes=1),
            now=datetime.now(tz=UTC),
        )
    ]
    assert {lease.execution_id for lease in leases} == {first, later, poisoned}
