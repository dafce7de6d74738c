"""Workers as real processes on PostgreSQL and Redis: retries, crashes, stalls, shutdown."""

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from tests.conftest import actor

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import NotFoundError
from jobledger.domain.execution import (
    BY_HANDLER,
    PERMANENT_FAILURE,
    Execution,
    ExecutionStatus,
    occurrence_execution_id,
)
from jobledger.domain.schedules import OneShotSchedule
from jobledger.services.executions import Executions
from jobledger.services.jobs import Jobs

if TYPE_CHECKING:
    from uuid import UUID

    from tests.integration.conftest import Harness, WorkerProcess


def test_a_failing_handler_ends_in_the_dlq_after_the_budget(harness: "Harness") -> None:
    """If a handler always fails, then the execution is dead-lettered after exactly
    max_retries + 1 attempts, and each retry starts after its backoff (0.5 s, then 1 s),
    no earlier and at most 0.5 s later."""
    execution = harness.run("test.fail", retries=2, error="boom")
    worker = harness.start_worker()
    harness.wait_for_all([execution], ExecutionStatus.DEAD_LETTERED, 30)
    worker.stop()
    history = harness.events(execution.id)
    names = [type(e).__name__ for e in history]
    assert names.count("Leased") == 3
    assert names.count("Retried") == 2
    assert names[-1] == "DeadLettered"
    leases = [e for e in history if isinstance(e, Execution.Leased)]
    retries = [e for e in history if isinstance(e, Execution.Retried)]
    for retried, next_lease, expected in zip(retries, leases[1:], (0.5, 1.0), strict=True):
        waited = (next_lease.timestamp - retried.timestamp).total_seconds()
        assert next_lease.timestamp >= retried.ready_at
        assert expected - 0.05 <= waited <= expected + 0.5, waited
    assert "boom" in history[-1].error


def test_kill_9_of_a_busy_worker_loses_nothing(harness: "Harness") -> None:
    """If a worker running 50 slow jobs is killed with -9, then every job completes on
    another worker after its lease expires, and the lost attempt is counted."""
    executions = [harness.run("test.delay", seconds=1.5) for _ in range(50)]
    first = harness.start_worker(worker_slots="50", worker_lease_ttl_seconds="2")
    harness.wait_for_all(executions, ExecutionStatus.RUNNING, 30)
    first.kill()
    second = harness.start_worker(worker_slots="50", worker_lease_ttl_seconds="2")
    harness.wait_for_all(executions, ExecutionStatus.COMPLETED, 60)
    second.stop()
    for execution in executions:
        names = Counter(type(e).__name__ for e in harness.events(execution.id))
        assert names["LeaseExpired"] == 1
        assert names["Completed"] == 1
        assert harness.execution(execution.id).attempts_used == 2


def test_a_stalled_worker_reports_too_late_and_is_rejected(harness: "Harness") -> None:
    """If a worker stalls past its lease and another re-runs the job, then the first
    worker's completion is rejected as stale and the execution completes once."""
    execution = harness.run("test.delay", seconds=2)
    first = harness.start_worker(worker_lease_ttl_seconds="1")
    harness.wait_for_all([execution], ExecutionStatus.RUNNING, 20)
    first.send_signal(signal.SIGSTOP)
    second = harness.start_worker(worker_lease_ttl_seconds="1")
    harness.wait_for_all([execution], ExecutionStatus.COMPLETED, 30)
    first.send_signal(signal.SIGCONT)
    time.sleep(3)  # the first worker wakes, finishes its sleep and reports
    first_log = first.stop()
    second.stop()
    names = Counter(type(e).__name__ for e in harness.events(execution.id))
    assert names["Completed"] == 1
    assert names["LeaseExpired"] == 1
    assert "worker.stale_report" in first_log or "worker.lease_lost" in first_log


def test_sigterm_lets_running_jobs_finish(harness: "Harness") -> None:
    """If a worker gets SIGTERM with jobs running, then they finish within the grace
    period and the worker exits cleanly."""
    executions = [harness.run("test.delay", seconds=1) for _ in range(4)]
    worker = harness.start_worker(worker_grace_seconds="10")
    harness.wait_for_all(executions, ExecutionStatus.RUNNING, 20)
    assert worker.terminate_and_wait(20) == 0
    assert {harness.status(e.id) for e in executions} == {ExecutionStatus.COMPLETED}


def test_sigterm_hands_back_what_cannot_finish(harness: "Harness") -> None:
    """If running jobs outlast the grace period, then the worker hands them back (not an
    attempt) and another worker completes them: none is lost."""
    executions = [harness.run("test.delay", seconds=3) for _ in range(3)]
    worker = harness.start_worker(worker_grace_seconds="0.2")
    harness.wait_for_all(executions, ExecutionStatus.RUNNING, 20)
    assert worker.terminate_and_wait(20) == 0
    second = harness.start_worker()
    harness.wait_for_all(executions, ExecutionStatus.COMPLETED, 30)
    second.stop()
    for execution in executions:
        names = Counter(type(e).__name__ for e in harness.events(execution.id))
        assert names["Deferred"] == 1
        assert harness.execution(execution.id).attempts_used == 1


def test_an_open_breaker_defers_that_handler_and_others_keep_flowing(
    harness: "Harness",
) -> None:
    """If a handler keeps failing, then its breaker opens and its executions are
    deferred, not failed, while test.echo executions all complete."""
    failing = [harness.run("test.fail", retries=0) for _ in range(6)]
    echoes = [harness.run("test.echo", n=i) for i in range(20)]
    worker = harness.start_worker(
        breaker_fail_max="2", breaker_reset_seconds="60", worker_slots="1"
    )

    def deferred(execution: Execution) -> bool:
        return any(isinstance(x, Execution.Deferred) for x in harness.events(execution.id))

    harness.wait_for_all(echoes, ExecutionStatus.COMPLETED, 30)
    harness.wait_for(lambda: sum(deferred(e) for e in failing) >= 4, 30)
    worker.stop()
    outcomes = Counter(harness.status(e.id) for e in failing)
    assert outcomes[ExecutionStatus.DEAD_LETTERED] == 2  # the two failures that opened it
    assert outcomes[ExecutionStatus.PENDING] == 4  # deferred: no attempt spent
    for execution in failing:
        if harness.status(execution.id) is ExecutionStatus.PENDING:
            assert harness.execution(execution.id).attempts_used == 0


def test_a_job_that_kills_its_worker_ends_in_the_dlq(harness: "Harness") -> None:
    """If a handler kills its worker process every time, then each lost lease counts as
    an attempt, the execution ends in the DLQ, and other jobs keep flowing."""
    poison = harness.run("test.crash", retries=1)
    echoes = [harness.run("test.echo", n=i) for i in range(10)]
    workers: list[WorkerProcess] = []
    deadline = time.monotonic() + 60
    while harness.status(poison.id) is not ExecutionStatus.DEAD_LETTERED:
        assert time.monotonic() < deadline, "the poison job never reached the DLQ"
        if not workers or workers[-1].process.poll() is not None:
            # A supervisor's job: start a new worker whenever the last one died.
            workers.append(harness.start_worker(worker_lease_ttl_seconds="1"))
        time.sleep(0.1)
    harness.wait_for_all(echoes, ExecutionStatus.COMPLETED, 30)
    names = Counter(type(e).__name__ for e in harness.events(poison.id))
    assert names["LeaseExpired"] == 2
    assert names["DeadLettered"] == 1
    assert len(workers) >= 2


def test_live_workers_are_listed_with_their_slots(harness: "Harness") -> None:
    """If a worker runs, then it is listed as live with its queues, slots and running
    executions; once it stops, it is not."""
    execution = harness.run("test.delay", seconds=2)
    worker = harness.start_worker(worker_slots="3", worker_lease_ttl_seconds="3")

    def listed() -> list[Any]:
        return harness.container.presence.live(
            now=datetime.now(tz=UTC), stale_after=timedelta(seconds=3)
        )

    harness.wait_for(lambda: any(execution.id in w.running for w in listed()), 20)
    [info] = listed()
    assert (info.slots, info.queues) == (3, ("default",))
    worker.stop()
    assert listed() == []


def test_finished_runs_are_never_reported_as_lost_leases(harness: "Harness") -> None:
    """If a thousand and more short jobs complete while the heartbeat extends leases
    every third of a second, then no lease is reported lost: a run whose outcome is
    being recorded (and whose lease may already have left the queue) is not extended."""
    executions = harness.run_many([("test.echo", {})] * 1500)
    worker = harness.start_worker(worker_lease_ttl_seconds="1", worker_slots="32")
    harness.wait_for_all(executions, ExecutionStatus.COMPLETED, 90)
    text = worker.stop()
    assert "worker.lease_lost" not in text
    assert "worker.stale_report" not in text


def test_a_run_cancelled_while_it_runs_is_not_a_stale_report(harness: "Harness") -> None:
    """If an operator cancels an execution while a worker runs it, then the execution
    stays cancelled, the handler is told to stop, and the worker logs the run as
    cancelled instead of counting a stale report."""
    execution = harness.run("test.delay", seconds=5)
    worker = harness.start_worker(worker_lease_ttl_seconds="1")
    harness.wait_for_all([execution], ExecutionStatus.RUNNING, 20)
    running = harness.execution(execution.id)
    running.cancel(by="operator", reason="not needed")
    harness.container.ledger.save(running)
    started = time.monotonic()
    text = ""
    while "worker.execution_cancelled" not in text and time.monotonic() - started < 10:
        time.sleep(0.1)
        worker.log.seek(0)
        text = worker.log.read().decode()
    assert time.monotonic() - started < 5  # told to stop, not left to sleep its 5 s
    text = worker.stop()
    assert "worker.execution_cancelled" in text
    assert "worker.stale_report" not in text
    assert harness.status(execution.id) is ExecutionStatus.CANCELLED


def test_a_handler_knows_the_occurrence_it_runs_for(harness: "Harness") -> None:
    """If a one-shot job fires, then its handler sees the occurrence's time in
    scheduled_for; a triggered run of the same job sees None."""
    ledger, now = harness.container.ledger, datetime.now(tz=UTC)
    run_at = (now + timedelta(seconds=1)).replace(microsecond=0)
    definition = JobDefinition(
        name="occurrence", spec=ExecutionSpec(handler="test.echo"), schedule=OneShotSchedule(run_at)
    )
    job = Jobs(ledger).schedule(definition, at=now, by=actor("test"))
    triggered = Jobs(ledger).trigger(job.id, key="by-hand", at=now, by=actor("test"))
    worker = harness.start_worker()
    scheduled = occurrence_execution_id(job.id, run_at)
    harness.wait_for(lambda: _status_or_none(harness, scheduled) is ExecutionStatus.COMPLETED, 20)
    harness.wait_for_all([triggered], ExecutionStatus.COMPLETED, 20)
    worker.stop()
    results = {
        e.originator_id: e.result
        for run in (scheduled, triggered.id)
        for e in harness.events(run)
        if isinstance(e, Execution.Completed)
    }
    assert results[scheduled]["scheduled_for"] == run_at.isoformat()
    assert results[triggered.id]["scheduled_for"] is None


def _status_or_none(harness: "Harness", execution_id: "UUID") -> ExecutionStatus | None:
    try:
        return harness.status(execution_id)
    except NotFoundError:
        return None


def test_a_run_of_a_disabled_test_handler_names_the_setting(harness: "Harness") -> None:
    """If a run names a test handler and its worker runs with the test handlers off
    (the run was enqueued before the setting changed), then the attempt's error says
    the test handlers are off and names the setting that turns them on."""
    execution = harness.run("test.echo", retries=0)
    worker = harness.start_worker(test_handlers="false")
    harness.wait_for_all([execution], ExecutionStatus.DEAD_LETTERED, 30)
    worker.stop()
    error = harness.events(execution.id)[-1].error
    assert error.startswith("no handler named 'test.echo': the test handlers are off")
    assert "JOBLEDGER_TEST_HANDLERS=true" in error


def test_a_handlers_decisions_are_recorded_by_a_worker_process(harness: "Harness") -> None:
    """If a worker process runs a handler that snoozes (for 0.5 s, until 4 s have
    passed), one that fails permanently with retries left, one that discards its run,
    and a run whose expires_at passed before any worker started, then the first
    completes as attempt 1 after Snoozed events, the second is dead-lettered after one
    attempt, the third is discarded by the handler, and the last is expired unrun."""
    until = (datetime.now(tz=UTC) + timedelta(seconds=4)).isoformat()
    snoozing = harness.run(
        "test.decide", retries=0, decide="snooze", seconds=0.5, until=until, reason="wait"
    )
    permanent = harness.run("test.decide", retries=3, decide="fail_permanently", reason="bad")
    discarding = harness.run("test.decide", retries=3, decide="discard", reason="moot")
    spec = ExecutionSpec(
        handler="test.echo", expires_at=datetime.now(tz=UTC) + timedelta(seconds=1)
    )
    expiring = Executions(harness.container.ledger).run(
        spec, key="expiring", at=datetime.now(tz=UTC), by=actor("test")
    )
    time.sleep(1.2)  # past the expiring run's deadline before any worker leases it
    worker = harness.start_worker()
    harness.wait_for_all([snoozing], ExecutionStatus.COMPLETED, 30)
    harness.wait_for_all([permanent], ExecutionStatus.DEAD_LETTERED, 30)
    harness.wait_for_all([discarding, expiring], ExecutionStatus.DISCARDED, 30)
    text = worker.stop()
    names = [type(e).__name__ for e in harness.events(snoozing.id)]
    assert names.count("Snoozed") >= 1
    assert "Retried" not in names
    assert {e.attempt for e in harness.events(snoozing.id) if isinstance(e, Execution.Leased)} == {
        1
    }
    dead = harness.execution(permanent.id)
    assert (dead.attempts_used, dead.last_error) == (1, PERMANENT_FAILURE + "bad")
    assert harness.events(discarding.id)[-1].by == BY_HANDLER
    assert [type(e).__name__ for e in harness.events(expiring.id)] == ["Enqueued", "Expired"]
    assert "worker.execution_expired" in text
    assert "worker.stale_report" not in text
