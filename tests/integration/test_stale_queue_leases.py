"""A worker records a queue lease only on the state of the execution the queue showed
when it leased, and only while the lease lasts (on PostgreSQL and Redis).

Leasing is two steps: take the entry in Redis, then record ``ExecutionLeased`` in the
log. A worker that stalls in between (paused, or waiting for a store that restarts)
must not record the old lease once the execution has moved on.
"""

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from jobledger.domain.execution import Execution
from jobledger.projections.queue.backend import Lease

if TYPE_CHECKING:
    from tests.integration.conftest import Harness

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def take_lease(harness: "Harness", ttl: timedelta) -> Lease:
    """A queue lease of the one execution, once the projection has it."""
    found: list[Lease] = []

    def leased() -> bool:
        found[:] = harness.container.queue.lease(
            "default", lease_ids=[uuid.uuid4()], ttl=ttl, now=datetime.now(UTC)
        )
        return bool(found)

    harness.wait_for(leased, 10)
    return found[0]


def leased_events(harness: "Harness", execution_id: uuid.UUID) -> list[Execution.Leased]:
    return [e for e in harness.events(execution_id) if isinstance(e, Execution.Leased)]


def test_a_lease_taken_before_the_execution_moved_on_is_given_back(harness: "Harness") -> None:
    """If a worker takes a queue lease and stalls while another attempt runs and fails,
    then the stalled worker does not record its old lease on the retried execution
    (whose back-off is not over): it records nothing, and no attempt starts early."""
    execution = harness.run("test.fail", retries=2)
    stalled = harness.container.worker("stalled")
    lease = take_lease(harness, timedelta(seconds=30))
    # Meanwhile another worker ran the attempt (its lease lapsed in Redis) and failed.
    moved_on = harness.execution(execution.id)
    other = uuid.uuid4()
    now = datetime.now(UTC)
    moved_on.lease(worker_id="other", lease_id=other, lease_expires_at=now + timedelta(seconds=30))
    moved_on.fail(lease_id=other, error="boom", at=now)
    harness.container.ledger.save_all(moved_on)
    assert moved_on.ready_at > datetime.now(UTC)
    current = harness.execution(execution.id)
    assert stalled._record_leases([lease], {execution.id: current}) == []
    assert [e.worker_id for e in leased_events(harness, execution.id)] == ["other"]


def test_a_lease_that_ran_out_before_it_was_recorded_is_given_back(harness: "Harness") -> None:
    """If a worker stalls between taking a queue lease and recording it for longer than
    the lease lasts, then it records nothing: the leader would only count the attempt
    as failed."""
    execution = harness.run("test.echo")
    stalled = harness.container.worker("stalled")
    lease = take_lease(harness, timedelta(milliseconds=200))
    time.sleep(0.3)
    current = harness.execution(execution.id)
    assert stalled._record_leases([lease], {execution.id: current}) == []
    assert leased_events(harness, execution.id) == []
