"""Loading many aggregates in one go, on SQLite and PostgreSQL."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from tests.integration.pool_stats import pool_requests

from jobledger.adapters.store import HELD_CONNECTIONS, open_ledger
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.infra.settings import load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.streams import load_many

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_load_many_equals_loading_each(ledger: Ledger) -> None:
    """If several executions (with histories of different lengths), a job and an unknown
    id are loaded together, then each execution comes back in the state a single load
    gives, and the job and the unknown id are left out."""
    executions = []
    for events in range(1, 5):
        execution = Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo"), ready_at=AT, trigger=Trigger.ADHOC
        )
        for _ in range(events - 1):
            lease_id = uuid.uuid4()
            execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=AT + timedelta(1))
            execution.defer(lease_id=lease_id, reason="circuit open", ready_at=AT)
        executions.append(execution)
    job = Job.schedule(
        JobDefinition(name="job", spec=ExecutionSpec(handler="test.echo")), at=AT, by="me"
    )
    ledger.save_all(*executions, job)
    wanted = [e.id for e in executions] + [job.id, uuid.uuid4()]
    loaded = load_many(ledger, Execution, wanted)
    assert set(loaded) == {e.id for e in executions}
    for execution in executions:
        single = ledger.get_execution(execution.id)
        assert loaded[execution.id].version == single.version == execution.version
        assert vars(loaded[execution.id]) == vars(single)
    assert load_many(ledger, Execution, []) == {}


@pytest.mark.postgres
def test_loads_on_a_held_connection_take_none_from_the_pool(postgres_ledger: Ledger) -> None:
    """If a worker's lease rounds load their executions on a held connection, then after
    the first load no round asks the pool for a connection, and each gives what a load
    on the pool gives."""
    held = postgres_ledger.held_connection()
    assert held is not None
    try:
        runs = [
            Execution.enqueue(
                spec=ExecutionSpec(handler="test.echo"), ready_at=AT, trigger=Trigger.ADHOC
            )
            for _ in range(3)
        ]
        postgres_ledger.save_all(*runs)
        ids = [run.id for run in runs]
        load_many(postgres_ledger, Execution, ids, held)
        before = pool_requests(postgres_ledger)
        for _ in range(10):
            loaded = load_many(postgres_ledger, Execution, ids, held)
        assert pool_requests(postgres_ledger) == before
        on_pool = load_many(postgres_ledger, Execution, ids)
        assert {i: vars(e) for i, e in loaded.items()} == {i: vars(e) for i, e in on_pool.items()}
    finally:
        held.close()


@pytest.mark.postgres
def test_held_connections_leave_the_pool_room_at_its_smallest_size(postgres_url: str) -> None:
    """If the pool has its smallest size and a process keeps as many connections as any
    role does, then other callers still get one at once: saves and loads go on."""
    settings = load_settings({}, database_url=postgres_url, database_pool_size="1")
    ledger = open_ledger(settings)
    kept = [ledger.held_connection() for _ in range(HELD_CONNECTIONS)]
    try:
        run = Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo"), ready_at=AT, trigger=Trigger.ADHOC
        )
        for held in kept:  # each takes its connection now
            assert held is not None
            load_many(ledger, Execution, [run.id], held)
        ledger.save(run)
        assert ledger.get_execution(run.id).version == 1
    finally:
        for held in kept:
            if held is not None:
                held.close()
        ledger.close()
