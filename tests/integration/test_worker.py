"""Workers as real processes on PostgreSQL and Redis: retries, crashes, stalls, shutdown."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.policies import RetryPolicy
from jobledger.runtime.bootstrap import Container, bootstrap
from jobledger.runtime.scheduler import SchedulerConfig, SchedulerService
from jobledger.runtime.settings import load_settings


@pytest.fixture
def container(postgres_url: str, redis_server: str) -> Iterator[Container]:
    settings = load_settings(
        {},
        database_url=postgres_url,
        redis_url=redis_server,
        redis_prefix=f"w{uuid.uuid4().hex[:8]}",
        projection_poll_ms="100",
        leader_ttl_ms="1000",
        leader_renew_ms="300",
        leader_poll_ms="100",
    )
    with bootstrap(settings) as built:
        projector = built.projector()
        projector.start()
        service = SchedulerService(built.scheduler(config=SchedulerConfig(recover_interval=0.2)))
        service.start()
        try:
            yield built
        finally:
            service.stop()
            projector.stop()


class WorkerProcess:
    """A `jobledger worker` subprocess whose log goes to a file (a pipe could fill up)."""

    def __init__(self, command: list[str], environ: dict[str, str]) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(  # noqa: S603 (our own entry point)
            command, env=environ, stdout=subprocess.DEVNULL, stderr=self.log
        )

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def terminate_and_wait(self, timeout: float) -> int:
        self.process.terminate()
        return self.process.wait(timeout)


def start_worker(container: Container, **settings: str) -> WorkerProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    environ |= {
        "JOBLEDGER_DATABASE_URL": container.settings.database_url,
        "JOBLEDGER_REDIS_URL": container.settings.redis_url,
        "JOBLEDGER_REDIS_PREFIX": container.settings.redis_prefix,
        "JOBLEDGER_LOG_FORMAT": "json",
    }
    environ |= {f"JOBLEDGER_{k.upper()}": v for k, v in settings.items()}
    return WorkerProcess([sys.executable, "-m", "jobledger.cli", "worker"], environ)


def stop(worker: WorkerProcess) -> str:
    """Stop the worker if it runs; returns its log."""
    process = worker.process
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    worker.log.seek(0)
    text = worker.log.read().decode()
    worker.log.close()
    return text


def run(container: Container, handler: str, *, retries: int = 3, **payload: Any) -> Execution:
    spec = ExecutionSpec(
        handler=handler,
        payload=payload,
        retry=RetryPolicy(
            max_retries=retries,
            initial_backoff=timedelta(milliseconds=500),
            max_backoff=timedelta(seconds=5),
            jitter=False,
        ),
        timeout=timedelta(seconds=30),
    )
    return container.ledger.run_adhoc(spec, key=uuid.uuid4().hex, at=datetime.now(tz=UTC))


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s")
        time.sleep(0.05)


def status(container: Container, execution_id: uuid.UUID) -> ExecutionStatus:
    return container.ledger.get_execution(execution_id).status


def events(container: Container, execution_id: uuid.UUID) -> list[Any]:
    return list(container.ledger.history(execution_id))


def test_a_failing_handler_ends_in_the_dlq_after_the_budget(container: Container) -> None:
    """If a handler always fails, then the execution is dead-lettered after exactly
    max_retries + 1 attempts, and each retry starts after its backoff (0.5 s, then 1 s),
    no earlier and at most 0.5 s later."""
    execution = run(container, "test.fail", retries=2, error="boom")
    worker = start_worker(container)
    try:
        wait_for(lambda: status(container, execution.id) is ExecutionStatus.DEAD_LETTERED, 30)
    finally:
        stop(worker)
    history = events(container, execution.id)
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


def test_kill_9_of_a_busy_worker_loses_nothing(container: Container) -> None:
    """If a worker running 50 slow jobs is killed with -9, then every job completes on
    another worker after its lease expires, and the lost attempt is counted."""
    executions = [run(container, "test.delay", seconds=1.5) for _ in range(50)]
    first = start_worker(container, worker_slots="50", worker_lease_ttl_seconds="2")
    second = None
    try:
        wait_for(
            lambda: all(status(container, e.id) is ExecutionStatus.RUNNING for e in executions), 30
        )
        first.kill()
        second = start_worker(container, worker_slots="50", worker_lease_ttl_seconds="2")
        wait_for(
            lambda: all(status(container, e.id) is ExecutionStatus.COMPLETED for e in executions),
            60,
        )
    finally:
        stop(first)
        if second is not None:
            stop(second)
    for execution in executions:
        names = Counter(type(e).__name__ for e in events(container, execution.id))
        assert names["LeaseExpired"] == 1
        assert names["Completed"] == 1
        assert container.ledger.get_execution(execution.id).attempts_used == 2


def test_a_stalled_worker_reports_too_late_and_is_rejected(container: Container) -> None:
    """If a worker stalls past its lease and another re-runs the job, then the first
    worker's completion is rejected as stale and the execution completes once."""
    execution = run(container, "test.delay", seconds=2)
    first = start_worker(container, worker_lease_ttl_seconds="1")
    second = None
    try:
        wait_for(lambda: status(container, execution.id) is ExecutionStatus.RUNNING, 20)
        first.send_signal(signal.SIGSTOP)
        second = start_worker(container, worker_lease_ttl_seconds="1")
        wait_for(lambda: status(container, execution.id) is ExecutionStatus.COMPLETED, 30)
        first.send_signal(signal.SIGCONT)
        time.sleep(3)  # the first worker wakes, finishes its sleep and reports
    finally:
        first_log = stop(first)
        if second is not None:
            stop(second)
    names = Counter(type(e).__name__ for e in events(container, execution.id))
    assert names["Completed"] == 1
    assert names["LeaseExpired"] == 1
    assert "worker.stale_report" in first_log or "worker.lease_lost" in first_log


def test_sigterm_lets_running_jobs_finish(container: Container) -> None:
    """If a worker gets SIGTERM with jobs running, then they finish within the grace
    period and the worker exits cleanly."""
    executions = [run(container, "test.delay", seconds=1) for _ in range(4)]
    worker = start_worker(container, worker_grace_seconds="10")
    wait_for(
        lambda: all(status(container, e.id) is ExecutionStatus.RUNNING for e in executions), 20
    )
    try:
        assert worker.terminate_and_wait(20) == 0
    finally:
        stop(worker)
    assert {status(container, e.id) for e in executions} == {ExecutionStatus.COMPLETED}


def test_sigterm_hands_back_what_cannot_finish(container: Container) -> None:
    """If running jobs outlast the grace period, then the worker hands them back (not an
    attempt) and another worker completes them: none is lost."""
    executions = [run(container, "test.delay", seconds=3) for _ in range(3)]
    worker = start_worker(container, worker_grace_seconds="0.2")
    wait_for(
        lambda: all(status(container, e.id) is ExecutionStatus.RUNNING for e in executions), 20
    )
    try:
        assert worker.terminate_and_wait(20) == 0
    finally:
        stop(worker)
    second = start_worker(container)
    try:
        wait_for(
            lambda: all(status(container, e.id) is ExecutionStatus.COMPLETED for e in executions),
            30,
        )
    finally:
        stop(second)
    for execution in executions:
        names = Counter(type(e).__name__ for e in events(container, execution.id))
        assert names["Deferred"] == 1
        assert container.ledger.get_execution(execution.id).attempts_used == 1


def test_an_open_breaker_defers_that_handler_and_others_keep_flowing(
    container: Container,
) -> None:
    """If a handler keeps failing, then its breaker opens and its executions are
    deferred, not failed, while test.echo executions all complete."""
    failing = [run(container, "test.fail", retries=0) for _ in range(6)]
    echoes = [run(container, "test.echo", n=i) for i in range(20)]
    worker = start_worker(
        container, breaker_fail_max="2", breaker_reset_seconds="60", worker_slots="1"
    )
    try:
        wait_for(
            lambda: all(status(container, e.id) is ExecutionStatus.COMPLETED for e in echoes), 30
        )
        wait_for(
            lambda: (
                sum(
                    any(isinstance(x, Execution.Deferred) for x in events(container, e.id))
                    for e in failing
                )
                >= 4
            ),
            30,
        )
    finally:
        stop(worker)
    outcomes = Counter(status(container, e.id) for e in failing)
    assert outcomes[ExecutionStatus.DEAD_LETTERED] == 2  # the two failures that opened it
    assert outcomes[ExecutionStatus.PENDING] == 4  # deferred: no attempt spent
    for execution in failing:
        if status(container, execution.id) is ExecutionStatus.PENDING:
            assert container.ledger.get_execution(execution.id).attempts_used == 0


def test_a_job_that_kills_its_worker_ends_in_the_dlq(container: Container) -> None:
    """If a handler kills its worker process every time, then each lost lease counts as
    an attempt, the execution ends in the DLQ, and other jobs keep flowing."""
    poison = run(container, "test.crash", retries=1)
    echoes = [run(container, "test.echo", n=i) for i in range(10)]
    workers: list[WorkerProcess] = []
    deadline = time.monotonic() + 60
    try:
        while status(container, poison.id) is not ExecutionStatus.DEAD_LETTERED:
            assert time.monotonic() < deadline, "the poison job never reached the DLQ"
            if not workers or workers[-1].process.poll() is not None:
                # A supervisor's job: start a new worker whenever the last one died.
                workers.append(start_worker(container, worker_lease_ttl_seconds="1"))
            time.sleep(0.1)
        wait_for(
            lambda: all(status(container, e.id) is ExecutionStatus.COMPLETED for e in echoes), 30
        )
    finally:
        for worker in workers:
            stop(worker)
    names = Counter(type(e).__name__ for e in events(container, poison.id))
    assert names["LeaseExpired"] == 2
    assert names["DeadLettered"] == 1
    assert len(workers) >= 2


def test_live_workers_are_listed_with_their_slots(container: Container) -> None:
    """If a worker runs, then it is listed as live with its queues, slots and running
    executions; once it stops, it is not."""
    execution = run(container, "test.delay", seconds=2)
    worker = start_worker(container, worker_slots="3", worker_lease_ttl_seconds="3")

    def listed() -> list[Any]:
        return container.presence.live(now=datetime.now(tz=UTC), stale_after=timedelta(seconds=3))

    try:
        wait_for(lambda: any(execution.id in w.running for w in listed()), 20)
        [info] = listed()
        assert (info.slots, info.queues) == (3, ("default",))
    finally:
        stop(worker)
    assert listed() == []
