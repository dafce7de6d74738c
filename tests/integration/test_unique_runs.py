"""Unique runs: one open run per key, exact under racing requests, and each
``on_conflict`` mode, through the use case on SQLite and PostgreSQL with the time as
an argument."""

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.roles import Role
from jobledger.domain.unique import OnConflict, UniqueSpec
from jobledger.projections.queue.backend import decode_spec
from jobledger.projections.queue.projection import QueueProjection
from jobledger.services.actors import Actor
from jobledger.services.executions import Executions
from jobledger.services.unique_runs import Duplicate, RunOutcome, Started

if TYPE_CHECKING:
    from jobledger.infra.settings import Settings

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
ALICE = Actor("alice", Role.OPERATOR)


@pytest.fixture
def container(store_settings: "Settings") -> Iterator[Container]:
    migrate(store_settings, progress=lambda _: None)
    with bootstrap(store_settings) as built:
        yield built


def order(number: int, **extra: object) -> ExecutionSpec:
    return ExecutionSpec(handler="test.echo", payload={"order_id": number, **extra})


def unique(mode: OnConflict = OnConflict.RETURN_EXISTING, **extra: object) -> UniqueSpec:
    return UniqueSpec(key="order:{payload.order_id}", on_conflict=mode, **extra)  # type: ignore[arg-type]


def run(
    container: Container, spec: ExecutionSpec, rule: UniqueSpec, at: datetime = AT, **kw: object
) -> RunOutcome:
    return Executions(container.ledger).run_unique(
        spec,
        rule,
        key=uuid.uuid4().hex,
        at=at,
        by=ALICE,
        **kw,  # type: ignore[arg-type]
    )


def test_a_duplicate_gets_the_run_that_holds_the_key_until_it_ends(container: Container) -> None:
    """If a second request names a key a pending run holds, then it starts nothing and
    gets that run; another key starts its own; once the holder completed (not among
    the states), the key passes to a new run."""
    first = run(container, order(42), unique())
    assert isinstance(first, Started)
    again = run(container, order(42, note="again"), unique(), AT + timedelta(seconds=1))
    assert again == Duplicate(first.execution, OnConflict.RETURN_EXISTING)
    assert isinstance(run(container, order(43), unique()), Started)
    holder = container.ledger.get_execution(first.execution.id)
    lease = uuid.uuid4()
    holder.lease(worker_id="w", lease_id=lease, lease_expires_at=AT + timedelta(minutes=1))
    holder.complete(lease_id=lease, duration=timedelta(seconds=1), result={})
    container.ledger.save_all(holder)
    later = run(container, order(42), unique(), AT + timedelta(seconds=2))
    assert isinstance(later, Started)
    assert later.execution.id != first.execution.id


def test_a_key_is_held_for_its_period_only(container: Container) -> None:
    """If the holder is still pending when the period has passed, then a new request
    starts a run of its own; within the period it is a duplicate."""
    rule = unique(period=timedelta(minutes=5))
    first = run(container, order(7), rule)
    assert isinstance(run(container, order(7), rule, AT + timedelta(minutes=4)), Duplicate)
    late = run(container, order(7), rule, AT + timedelta(minutes=5))
    assert isinstance(late, Started)
    assert late.execution.id != first.execution.id


def test_replace_swaps_the_pending_payload_and_debounce_also_its_start(
    container: Container,
) -> None:
    """If a duplicate asks to replace, then the pending run gets its payload (in the
    log and in the queue entry a worker leases); with debounce its start also moves to
    the duplicate's due time; a running holder is returned as it is."""
    first = run(container, order(9, v=1), unique(), ready_at=AT + timedelta(minutes=1))
    assert isinstance(first, Started)
    replaced = run(container, order(9, v=2), unique(OnConflict.REPLACE))
    assert isinstance(replaced, Duplicate)
    assert replaced.action is OnConflict.REPLACE
    debounced = run(
        container, order(9, v=3), unique(OnConflict.DEBOUNCE), ready_at=AT + timedelta(minutes=3)
    )
    assert isinstance(debounced, Duplicate)
    execution = container.ledger.get_execution(first.execution.id)
    assert execution.spec.payload == {"order_id": 9, "v": 3}
    assert execution.ready_at == AT + timedelta(minutes=3)
    kinds = [type(e) for e in container.ledger.history(execution.id)]
    assert kinds == [Execution.Enqueued, Execution.Replaced, Execution.Debounced]
    projection = QueueProjection(container.ledger, container.queue, store_id=container.store_id)
    while projection.step():
        pass
    [item] = [i for i in container.queue.items("default") if i.execution_id == execution.id]
    assert decode_spec(item.spec).payload == {"order_id": 9, "v": 3}
    assert item.at == AT + timedelta(minutes=3)
    lease = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease, lease_expires_at=AT + timedelta(minutes=9))
    container.ledger.save_all(execution)
    running = run(container, order(9, v=4), unique(OnConflict.REPLACE))
    assert running == Duplicate(execution, OnConflict.RETURN_EXISTING)
    assert container.ledger.get_execution(execution.id).status is ExecutionStatus.RUNNING


def test_a_key_the_payload_cannot_fill_is_refused_naming_it(container: Container) -> None:
    """If the key names a payload field the payload lacks, then the request is refused
    naming unique.key, and nothing is written."""
    head = container.head()
    with pytest.raises(InvalidDefinitionError) as refused:
        run(container, ExecutionSpec(handler="test.echo", payload={}), unique())
    assert refused.value.field == "unique.key"
    with pytest.raises(InvalidDefinitionError) as bad_states:
        run(container, order(1), unique(states=("finished",)))
    assert bad_states.value.field == "unique.states"
    assert container.head() == head


def test_racing_requests_for_one_key_make_one_run(container: Container) -> None:
    """If eight requests with one key race, then exactly one starts a run and the
    seven others get that run as a duplicate."""
    barrier = threading.Barrier(8)
    outcomes: list[RunOutcome] = []
    lock = threading.Lock()

    def request(n: int) -> None:
        barrier.wait()
        outcome = run(container, order(5, n=n), unique())
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=request, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    started = [o for o in outcomes if isinstance(o, Started)]
    assert len(started) == 1
    assert {o.execution.id for o in outcomes} == {started[0].execution.id}
