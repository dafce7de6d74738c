"""The worker's rules in this process, on the embedded stores and a clock the test moves.

A real ``Worker`` leases from the in-memory queue, runs handlers and records outcomes in
a SQLite log through the group-commit writer, as `jobledger dev` does. The test steps the
queue projection itself instead of a follower thread, and time stands still until the
test advances the clock, so lease expiry, backoff and deferrals need no real waiting:
only the worker's own poll (a few milliseconds) takes real time. test_worker.py checks
the same rules with worker processes on PostgreSQL and Redis, with signals and kills.
"""

import asyncio
import contextlib
import gc
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs
from tests.conftest import actor
from tests.integration import code_jobs
from tests.integration.executions import LogReads, adhoc_spec

from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import BY_HANDLER, PERMANENT_FAILURE, Execution, ExecutionStatus
from jobledger.infra.breakers import BreakerSettings
from jobledger.infra.settings import load_settings
from jobledger.infra.writer import GroupCommitWriter
from jobledger.projections.queue.backend import QueueState
from jobledger.projections.queue.projection import QueueProjection
from jobledger.runtime.breakers import Breakers
from jobledger.runtime.handlers.base import (
    Discard,
    Handler,
    HandlerCancelledError,
    HandlerContext,
    PermanentError,
    Snooze,
)
from jobledger.runtime.handlers.builtin import BUILTIN
from jobledger.runtime.handlers.code import code_handler
from jobledger.runtime.handlers.registry import HandlerRegistry
from jobledger.runtime.outcomes import MAX_ERROR_LENGTH
from jobledger.runtime.worker import Worker, WorkerConfig
from jobledger.services.executions import Executions

POLL = 0.005  # the worker's idle poll, and the test's
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
BACKOFF = timedelta(seconds=10)  # the first retry's; it doubles per attempt
GATE = "test.gate"


class Clock:
    """The time the worker, the queue projection and the lease recovery go by; it
    stands still until the test moves it."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now


class Gate:
    """A handler that holds its runs until the test opens it; a run told to stop (its
    lease lost, or its execution cancelled) stops with HandlerCancelledError."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self.entered = 0
        self.told_to_stop = 0

    def open(self) -> None:
        self._open.set()

    async def __call__(self, context: HandlerContext) -> dict[str, Any]:
        self.entered += 1
        while not self._open.is_set():
            if context.cancelled.is_set():
                self.told_to_stop += 1
                raise HandlerCancelledError("told to stop")
            await asyncio.sleep(POLL)
        return {"attempt": context.attempt}


class Blocking:
    """A handler that blocks a thread of its own until its run is told to stop, as
    synchronous code run off the event loop does: cancelling the task cannot stop it."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    async def __call__(self, context: HandlerContext) -> dict[str, Any]:
        def block() -> None:
            if context.cancelled.wait(5.0):
                self.stopped.set()

        await asyncio.to_thread(block)
        return {}


class InProcess(LogReads):
    """An embedded container, its queue projection stepped by hand, and workers on it."""

    def __init__(self, container: Container, clock: Clock) -> None:
        self.container = container
        self.clock = clock
        self.projection = QueueProjection(
            container.ledger, container.queue, store_id=container.store_id, clock=clock
        )
        self.scheduler = container.scheduler()
        self.sync()

    def sync(self) -> None:
        """Bring the queue up to the log, as the projector's follower does."""
        while self.projection.step():
            pass

    def run(
        self,
        handler: str,
        *,
        retries: int = 3,
        timeout: timedelta = timedelta(seconds=30),
        **payload: Any,
    ) -> Execution:
        """An ad-hoc run of ``handler``, ready now and in the queue."""
        spec = adhoc_spec(
            handler,
            payload,
            retries=retries,
            backoff=BACKOFF,
            max_backoff=timedelta(minutes=5),
            timeout=timeout,
        )
        execution = Executions(self.container.ledger).run(
            spec, key=uuid.uuid4().hex, at=self.clock(), by=actor()
        )
        self.sync()
        return execution

    def worker(
        self,
        handlers: Mapping[str, Handler] | None = None,
        *,
        breakers: Breakers | None = None,
        writer: GroupCommitWriter | None = None,
        **config: Any,
    ) -> Worker:
        """A worker on the clock with the test handlers plus ``handlers``, and metrics
        of its own; ``config`` overrides WorkerConfig fields."""
        return Worker(
            self.container.ledger,
            writer or self.container.writer,
            self.container.queue,
            HandlerRegistry({**BUILTIN, **(handlers or {})}),
            config=WorkerConfig(**{"idle_poll": POLL, **config}),
            now=self.clock,
            breakers=breakers,
        )

    @contextlib.asynccontextmanager
    async def running(self, *workers: Worker) -> AsyncIterator[None]:
        """The workers run until the block ends, then stop as on SIGTERM."""
        stop = asyncio.Event()
        tasks = [asyncio.create_task(worker.run(stop)) for worker in workers]
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(*tasks)

    async def until(
        self, condition: Callable[[], bool], within: float = 10.0, *, follow: bool = True
    ) -> None:
        """Let the workers run until ``condition``, the queue following the log unless
        ``follow`` is False (then only the workers change it)."""
        deadline = time.monotonic() + within
        while True:
            if follow:
                self.sync()
            if condition():
                return
            if time.monotonic() > deadline:
                pytest.fail(f"not within {within} s")
            await asyncio.sleep(POLL)

    async def idle(self, polls: int = 20) -> None:
        """Let the workers poll the queue ``polls`` times or so (to see that they take
        nothing: a test of an absence, which cannot fail by being slow)."""
        for _ in range(polls):
            self.sync()
            await asyncio.sleep(POLL)

    def names(self, execution_id: uuid.UUID) -> list[str]:
        return [type(e).__name__ for e in self.events(execution_id)]

    def queued(self, execution_id: uuid.UUID) -> QueueState | None:
        """The state of the execution's queue entry; None when it has none."""
        for item in self.container.queue.items("default"):
            if item.execution_id == execution_id:
                return item.state
        return None


@contextlib.contextmanager
def in_process(folder: Path) -> Iterator[InProcess]:
    """An embedded store in ``folder``, on a clock standing at START."""
    settings = load_settings({}, data_dir=str(folder), test_handlers="true")
    migrate(settings, progress=lambda _: None)
    with bootstrap(settings, role="test") as container:
        yield InProcess(container, Clock(START))


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[InProcess]:
    with in_process(tmp_path) as made:
        yield made


def counted(worker: Worker, handler: str, outcome: str) -> float:
    """The worker's jobledger_completions_total for ``handler`` and ``outcome``."""
    labels = {"handler": handler, "outcome": outcome}
    value = worker.metrics.registry.get_sample_value("jobledger_completions_total", labels)
    return value or 0.0


def logged(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == event]


def test_a_handler_that_returns_completes_its_run(embedded: InProcess) -> None:
    """If a handler returns, then the run completes with its result and duration, the
    worker acknowledges the lease in the queue without waiting for the projection,
    counts one completion, and measures the wait from due to lease on its clock."""

    async def scenario() -> None:
        execution = embedded.run("test.echo", n=1)
        embedded.clock.advance(timedelta(seconds=3))  # due 3 s before the worker starts
        worker = embedded.worker()
        async with embedded.running(worker):
            await embedded.until(
                lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED, follow=False
            )
            await embedded.until(lambda: embedded.queued(execution.id) is None, 5, follow=False)
        [completed] = [
            e for e in embedded.events(execution.id) if isinstance(e, Execution.Completed)
        ]
        assert completed.result == {"echo": {"n": 1}, "scheduled_for": None}
        assert completed.duration >= timedelta(0)
        assert counted(worker, "test.echo", "completed") == 1
        assert (worker.stats.leased, worker.stats.completed) == (1, 1)
        waited = worker.metrics.registry.get_sample_value("jobledger_schedule_to_start_seconds_sum")
        assert waited == 3.0

    asyncio.run(scenario())


def test_a_result_the_log_cannot_keep_fails_the_attempt_naming_it(embedded: InProcess) -> None:
    """If a handler returns a result nested deeper than the stores take, or no JSON
    object, then the attempt fails with an error naming the result and the fix, and
    the run's history still loads (nothing unreadable was written)."""

    async def deep(_context: HandlerContext) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for _ in range(600):
            result = {"inner": result}
        return result

    async def listed(_context: HandlerContext) -> Any:
        return [1, 2]

    async def scenario() -> None:
        too_deep = embedded.run("tests.deep", retries=0)
        not_an_object = embedded.run("tests.listed", retries=0)
        worker = embedded.worker({"tests.deep": deep, "tests.listed": listed})
        async with embedded.running(worker):
            for run in (too_deep, not_an_object):
                await embedded.until(
                    lambda r=run: embedded.status(r.id) is ExecutionStatus.DEAD_LETTERED  # type: ignore[misc]
                )
        errors = [
            embedded.container.ledger.get_execution(r.id).last_error
            for r in (too_deep, not_an_object)
        ]
        assert "result" in str(errors[0])
        assert "nests deeper than" in str(errors[0])
        assert "returned a list; return a JSON object" in str(errors[1])

    asyncio.run(scenario())


def test_a_plain_handler_that_blocks_delays_no_other_slot(embedded: InProcess) -> None:
    """If a plain (not async) handler sleeps 2 s in one slot, then the runs of the other
    slot are leased, run and recorded meanwhile: the sleep holds a thread of the
    worker's handler pool, not its event loop."""

    async def scenario() -> None:
        sleeper = embedded.run("tests.block", seconds=2)
        quick = [embedded.run("test.echo", n=n) for n in range(6)]
        handlers = {"tests.block": code_handler(code_jobs.block)}
        worker = embedded.worker(handlers, slots=2)
        async with embedded.running(worker):
            await embedded.until(
                lambda: all(embedded.status(q.id) is ExecutionStatus.COMPLETED for q in quick)
            )
            assert embedded.status(sleeper.id) is ExecutionStatus.RUNNING
            await embedded.until(
                lambda: embedded.status(sleeper.id) is ExecutionStatus.COMPLETED, 10
            )
        [completed] = [e for e in embedded.events(sleeper.id) if isinstance(e, Execution.Completed)]
        assert completed.result == {"slept": 2.0}
        assert completed.duration >= timedelta(seconds=2)

    asyncio.run(scenario())


def test_a_failing_handler_is_retried_after_each_backoff_then_dead_lettered(
    embedded: InProcess,
) -> None:
    """If a handler always fails, then each retry is ready one backoff (10 s, then 20 s)
    after the failure on the worker's clock and is not leased a moment before, and after
    max_retries + 1 attempts the run is dead-lettered; each outcome is counted and
    logged under its own name."""

    async def scenario() -> None:
        execution = embedded.run("test.fail", retries=2, error="boom")
        worker = embedded.worker()

        def attempts_used(count: int) -> Callable[[], bool]:
            return lambda: embedded.execution(execution.id).attempts_used == count

        with capture_logs() as logs:
            async with embedded.running(worker):
                for attempt, backoff in enumerate((BACKOFF, 2 * BACKOFF), start=1):
                    await embedded.until(attempts_used(attempt))
                    retry_at = embedded.clock() + backoff
                    assert embedded.execution(execution.id).ready_at == retry_at
                    embedded.clock.advance(backoff - timedelta(milliseconds=1))
                    await embedded.idle()
                    assert embedded.names(execution.id).count("Leased") == attempt
                    embedded.clock.advance(timedelta(milliseconds=1))
                await embedded.until(
                    lambda: embedded.status(execution.id) is ExecutionStatus.DEAD_LETTERED
                )
        assert embedded.names(execution.id).count("Leased") == 3
        assert embedded.events(execution.id)[-1].error == "HandlerError: boom"
        assert counted(worker, "test.fail", "retried") == 2
        assert counted(worker, "test.fail", "dead_lettered") == 1
        failed = logged(logs, "worker.execution_failed")
        assert [line["attempt"] for line in failed] == [1, 2]
        assert failed[0]["retry_at"] == (START + BACKOFF).isoformat()
        [dead] = logged(logs, "worker.execution_dead_lettered")
        assert (dead["attempt"], dead["error"]) == (3, "HandlerError: boom")

    asyncio.run(scenario())


def test_an_expired_lease_is_an_attempt_and_its_late_report_is_stale(
    embedded: InProcess,
) -> None:
    """If a worker holds a run past its lease and the recovery retries it on another
    worker, then the late completion of the first is rejected as a stale report and
    counted, and the run completes once, on its second attempt."""

    async def scenario() -> None:
        stalled = Gate()
        execution = embedded.run(GATE, retries=1)
        first = embedded.worker({GATE: stalled}, slots=1)
        second = embedded.worker({GATE: BUILTIN["test.echo"]})
        with capture_logs() as logs:
            async with embedded.running(first):
                await embedded.until(lambda: stalled.entered == 1)
                embedded.clock.advance(WorkerConfig().lease_ttl + timedelta(seconds=1))
                assert embedded.scheduler.recover(embedded.clock()) == 1
                embedded.clock.advance(BACKOFF)
                async with embedded.running(second):
                    await embedded.until(
                        lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED
                    )
                stalled.open()
                await embedded.until(lambda: first.stats.stale_reports == 1)
        names = embedded.names(execution.id)
        assert (names.count("LeaseExpired"), names.count("Completed")) == (1, 1)
        assert embedded.execution(execution.id).attempts_used == 2
        assert (first.stats.completed, second.stats.completed) == (0, 1)
        assert first.metrics.registry.get_sample_value("jobledger_stale_reports_total") == 1
        [stale] = logged(logs, "worker.stale_report")
        assert (stale["outcome"], stale["attempt"]) == ("complete", 1)

    asyncio.run(scenario())


def test_an_open_breaker_defers_runs_without_spending_attempts(embedded: InProcess) -> None:
    """If a handler's breaker opens, then its later runs are deferred by the configured
    time on the worker's clock without spending an attempt, come back only then (and are
    deferred again while it stays open), and other handlers' runs all complete."""

    async def scenario() -> None:
        failing = [embedded.run("test.fail", retries=0) for _ in range(4)]
        echoes = [embedded.run("test.echo", n=i) for i in range(5)]
        breakers = Breakers(settings=BreakerSettings(fail_max=2, reset_timeout=600))
        worker = embedded.worker(breakers=breakers, slots=1)
        defer = worker.config.defer_when_open

        def deferrals(execution: Execution) -> int:
            return embedded.names(execution.id).count("Deferred")

        def settled() -> bool:
            done = all(embedded.status(e.id) is ExecutionStatus.COMPLETED for e in echoes)
            return done and sum(deferrals(e) == 1 for e in failing) == 2

        with capture_logs() as logs:
            async with embedded.running(worker):
                await embedded.until(settled)
                deferred = [e for e in failing if deferrals(e) == 1]
                embedded.clock.advance(defer - timedelta(milliseconds=1))
                await embedded.idle()
                assert [deferrals(e) for e in deferred] == [1, 1]
                embedded.clock.advance(timedelta(milliseconds=1))
                await embedded.until(lambda: [deferrals(e) for e in deferred] == [2, 2])
        statuses = [embedded.status(e.id) for e in failing]
        assert statuses.count(ExecutionStatus.DEAD_LETTERED) == 2  # the failures that opened it
        for execution in deferred:
            again = embedded.execution(execution.id)
            assert (again.status, again.attempts_used) == (ExecutionStatus.PENDING, 0)
            assert again.ready_at == START + 2 * defer
        assert counted(worker, "test.fail", "deferred") == 4
        assert worker.metrics.registry.get_sample_value("jobledger_deferrals_total") == 4
        assert counted(worker, "test.echo", "completed") == 5
        assert all(
            "circuit open" in line["reason"] for line in logged(logs, "worker.execution_deferred")
        )

    asyncio.run(scenario())


def test_a_run_cancelled_while_it_runs_is_told_to_stop_and_not_stale(
    embedded: InProcess,
) -> None:
    """If an operator cancels a run while its handler runs, then the heartbeat finds the
    lease gone and tells the handler to stop, the run stays cancelled, and the worker
    counts it as cancelled, not as a stale report."""

    async def scenario() -> None:
        gate = Gate()
        execution = embedded.run(GATE)
        # A short ttl only makes the heartbeat beat often (every 0.1 s of real time):
        # the lease never expires, as the clock stands still.
        worker = embedded.worker({GATE: gate}, lease_ttl=timedelta(seconds=0.3))
        with capture_logs() as logs:
            async with embedded.running(worker):
                await embedded.until(lambda: gate.entered == 1)
                running = embedded.execution(execution.id)
                running.cancel(by="operator", reason="not needed")
                embedded.container.ledger.save(running)
                await embedded.until(lambda: worker.stats.cancelled == 1)
        assert gate.told_to_stop == 1
        assert embedded.status(execution.id) is ExecutionStatus.CANCELLED
        assert worker.stats.stale_reports == 0
        assert counted(worker, GATE, "cancelled") == 1
        assert [line["event"] for line in logs if line["event"].startswith("worker.")] == [
            "worker.started",
            "worker.lease_lost",
            "worker.execution_cancelled",
            "worker.stopped",
        ]

    asyncio.run(scenario())


def test_a_stop_lets_a_running_handler_finish_within_the_grace(embedded: InProcess) -> None:
    """If a worker is asked to stop while a handler runs, then it waits for the handler
    within the grace period and records its completion, handing nothing back."""

    async def scenario() -> None:
        gate = Gate()
        execution = embedded.run(GATE)
        worker = embedded.worker({GATE: gate}, grace=10.0)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        await embedded.until(lambda: gate.entered == 1)
        stop.set()
        await embedded.idle()
        assert not task.done()  # waiting for the run
        gate.open()
        await task
        assert embedded.status(execution.id) is ExecutionStatus.COMPLETED
        assert (worker.stats.completed, worker.stats.handed_back) == (1, 0)

    asyncio.run(scenario())


def test_a_stop_hands_back_what_outlasts_the_grace(embedded: InProcess) -> None:
    """If a handler outlasts the grace period of a stopping worker, then the run is
    handed back (deferred to now, no attempt spent, back in the queue at once) and
    another worker completes it on its first counted attempt."""

    async def scenario() -> None:
        execution = embedded.run(GATE)
        first = embedded.worker({GATE: Gate()}, grace=0.05)
        async with embedded.running(first):
            await embedded.until(lambda: embedded.status(execution.id) is ExecutionStatus.RUNNING)
        # Before any projection step: the worker put the entry back itself.
        assert embedded.queued(execution.id) is QueueState.PENDING
        deferred = embedded.events(execution.id)[-1]
        assert isinstance(deferred, Execution.Deferred)
        assert (deferred.reason, deferred.ready_at) == ("worker shutting down", START)
        assert embedded.execution(execution.id).attempts_used == 0
        assert (first.stats.handed_back, counted(first, GATE, "handed_back")) == (1, 1)
        second = embedded.worker({GATE: BUILTIN["test.echo"]})
        async with embedded.running(second):
            await embedded.until(lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED)
        assert embedded.execution(execution.id).attempts_used == 1

    asyncio.run(scenario())


def test_a_handler_past_its_timeout_is_told_to_stop_and_fails(embedded: InProcess) -> None:
    """If a handler outlasts its run's timeout, then the attempt fails with an error
    that gives the timeout, and the handler is told to stop (which code blocking a
    thread, out of reach of the task's cancellation, needs)."""

    async def scenario() -> None:
        blocking = Blocking()
        execution = embedded.run(GATE, retries=0, timeout=timedelta(seconds=1))
        worker = embedded.worker({GATE: blocking})
        async with embedded.running(worker):
            await embedded.until(
                lambda: embedded.status(execution.id) is ExecutionStatus.DEAD_LETTERED
            )
        assert embedded.events(execution.id)[-1].error == "timed out after 1 s"
        assert counted(worker, GATE, "dead_lettered") == 1
        assert blocking.stopped.wait(2)

    asyncio.run(scenario())


def test_a_run_without_a_handler_here_fails_naming_it(embedded: InProcess) -> None:
    """If a run names a handler this worker does not have, then its attempt fails with
    an error naming the handler, and is retried like any failure."""

    async def scenario() -> None:
        execution = embedded.run("other.missing", retries=1)
        worker = embedded.worker()
        async with embedded.running(worker):
            await embedded.until(lambda: embedded.execution(execution.id).attempts_used == 1)
        assert embedded.execution(execution.id).last_error == "no handler named 'other.missing'"
        assert counted(worker, "other.missing", "retried") == 1

    asyncio.run(scenario())


def test_a_long_error_is_cut_before_it_is_stored_and_logged(embedded: InProcess) -> None:
    """If a handler fails with a very long message (a whole response body), then the
    stored and the logged error are both cut to the limit."""

    async def scenario() -> None:
        execution = embedded.run("test.fail", retries=0, error="x" * 10 * MAX_ERROR_LENGTH)
        worker = embedded.worker()
        with capture_logs() as logs:
            async with embedded.running(worker):
                await embedded.until(
                    lambda: embedded.status(execution.id) is ExecutionStatus.DEAD_LETTERED
                )
        stored = embedded.events(execution.id)[-1].error
        assert stored.startswith("HandlerError: xxx")
        assert len(stored) == MAX_ERROR_LENGTH
        [line] = logged(logs, "worker.execution_dead_lettered")
        assert line["error"] == stored

    asyncio.run(scenario())


def test_many_short_runs_complete_once_with_no_lost_lease(embedded: InProcess) -> None:
    """If hundreds of short runs go through a worker whose heartbeat beats every 0.1 s,
    then each completes exactly once through the group-commit writer, and no lease is
    reported lost nor any report stale (a run being recorded is not a lost lease)."""

    async def scenario() -> None:
        executions = [embedded.run("test.echo", n=i) for i in range(200)]
        worker = embedded.worker(slots=16, lease_ttl=timedelta(seconds=0.3))
        saved_before = embedded.container.writer.stats.items
        with capture_logs() as logs:
            async with embedded.running(worker):
                await embedded.until(lambda: worker.stats.completed == len(executions))
        assert {embedded.status(e.id) for e in executions} == {ExecutionStatus.COMPLETED}
        assert all(embedded.names(e.id).count("Completed") == 1 for e in executions)
        # Every lease and every completion is an item of the writer's batches.
        assert embedded.container.writer.stats.items - saved_before == 2 * len(executions)
        events = {line["event"] for line in logs}
        assert "worker.lease_lost" not in events
        assert "worker.stale_report" not in events

    asyncio.run(scenario())


def test_a_finished_run_is_freed_without_the_cyclic_collector(embedded: InProcess) -> None:
    """If runs finish while the cyclic collector is off, then none of them is left in
    memory: nothing a run holds refers back to it, so it goes with its last reference
    instead of waiting for the collector (whose passes over every finished run cost
    the worker a tenth of its time)."""

    async def scenario() -> int:
        executions = [embedded.run("test.echo", n=i) for i in range(20)]
        worker = embedded.worker(slots=4)
        async with embedded.running(worker):
            await embedded.until(lambda: worker.stats.completed == len(executions))
        assert not worker.running
        return sum(type(o).__name__ == "_Running" for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        left = asyncio.run(scenario())
    finally:
        gc.enable()
    assert left == 0


def test_an_outcome_goes_with_the_next_round_of_leases(embedded: InProcess) -> None:
    """If a run's handler returns, then its slot is leased again at once and its outcome
    is saved in the same transaction as that round's leases (or on its own when there
    is nothing left to lease), without waiting for the writer's delay."""

    async def scenario() -> None:
        executions = [embedded.run("test.echo", n=i) for i in range(5)]
        # A delay far longer than the test may take: only the rounds' flushes save.
        with GroupCommitWriter(embedded.container.ledger, max_delay=30.0) as writer:
            worker = embedded.worker(slots=1, writer=writer)
            async with embedded.running(worker):
                await embedded.until(lambda: worker.stats.completed == len(executions))
            # One transaction per round: the first lease, four outcomes each with the
            # next lease, and the last outcome.
            assert (writer.stats.batches, writer.stats.items) == (6, 10)
        assert {embedded.status(e.id) for e in executions} == {ExecutionStatus.COMPLETED}

    asyncio.run(scenario())


# ---- what a handler decides besides pass or fail ------------------------------------


class Decides:
    """A handler that raises ``decisions`` one per run of it, in order, then returns."""

    def __init__(self, *decisions: Exception) -> None:
        self.decisions = list(decisions)
        self.calls = 0

    async def __call__(self, context: HandlerContext) -> dict[str, Any]:
        self.calls += 1
        if self.decisions:
            raise self.decisions.pop(0)
        return {"attempt": context.attempt}


def test_a_snooze_runs_again_later_without_spending_an_attempt(embedded: InProcess) -> None:
    """If a handler with no retries left snoozes twice for 60 s, then its run comes back
    only 60 s later each time (on the worker's clock), is leased as attempt 1 each time,
    and completes: the snoozes spent no attempt; each is a Snoozed event with the
    handler's reason, counted and logged."""
    handler = Decides(Snooze(60, "the report is not ready"), Snooze(60, "still not ready"))

    async def scenario() -> None:
        execution = embedded.run("tests.decides", retries=0)
        worker = embedded.worker({"tests.decides": handler})
        with capture_logs() as logs:
            async with embedded.running(worker):
                for snoozes in (1, 2):
                    await embedded.until(
                        lambda n=snoozes: embedded.names(execution.id).count("Snoozed") == n  # type: ignore[misc]
                    )
                    # The snooze may have been saved after the last look's sync.
                    embedded.sync()
                    assert embedded.queued(execution.id) is QueueState.PENDING
                    embedded.clock.advance(timedelta(seconds=59))
                    await embedded.idle()
                    assert handler.calls == snoozes
                    embedded.clock.advance(timedelta(seconds=1))
                await embedded.until(
                    lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED
                )
        history = embedded.events(execution.id)
        assert [e.attempt for e in history if isinstance(e, Execution.Leased)] == [1, 1, 1]
        snoozed = [e for e in history if isinstance(e, Execution.Snoozed)]
        assert [e.reason for e in snoozed] == ["the report is not ready", "still not ready"]
        assert snoozed[0].ready_at == START + timedelta(seconds=60)
        assert embedded.execution(execution.id).attempts_used == 1
        assert counted(worker, "tests.decides", "snoozed") == 2
        assert worker.stats.snoozed == 2
        assert len(logged(logs, "worker.execution_snoozed")) == 2

    asyncio.run(scenario())


def test_a_permanent_failure_dead_letters_at_once(embedded: InProcess) -> None:
    """If a handler with three retries left raises PermanentError, then its run is
    dead-lettered after that one attempt, its error says the failure is permanent and
    gives the handler's reason, and the queue shows it dead."""

    async def scenario() -> None:
        execution = embedded.run("tests.decides", retries=3)
        worker = embedded.worker({"tests.decides": Decides(PermanentError("no such user 7"))})
        async with embedded.running(worker):
            await embedded.until(
                lambda: embedded.status(execution.id) is ExecutionStatus.DEAD_LETTERED
            )
            await embedded.until(lambda: embedded.queued(execution.id) is QueueState.DEAD)
        run = embedded.execution(execution.id)
        assert run.attempts_used == 1
        assert run.last_error == PERMANENT_FAILURE + "no such user 7"
        [dead] = [e for e in embedded.events(execution.id) if isinstance(e, Execution.DeadLettered)]
        assert dead.permanent
        assert counted(worker, "tests.decides", "dead_lettered") == 1

    asyncio.run(scenario())


def test_a_discard_ends_the_run_with_the_handlers_reason(embedded: InProcess) -> None:
    """If a handler with retries left raises Discard, then its run is discarded by the
    handler with its reason after one attempt, never retried, and leaves the queue."""

    async def scenario() -> None:
        execution = embedded.run("tests.decides", retries=3)
        handler = Decides(Discard("the order was cancelled"))
        worker = embedded.worker({"tests.decides": handler})
        async with embedded.running(worker):
            await embedded.until(lambda: embedded.status(execution.id) is ExecutionStatus.DISCARDED)
            await embedded.until(lambda: embedded.queued(execution.id) is None)
            await embedded.idle()
        [discarded] = [
            e for e in embedded.events(execution.id) if isinstance(e, Execution.Discarded)
        ]
        assert (discarded.by, discarded.reason) == (BY_HANDLER, "the order was cancelled")
        assert handler.calls == 1
        assert counted(worker, "tests.decides", "discarded") == 1

    asyncio.run(scenario())


def test_a_run_not_started_by_its_expires_at_is_discarded_unrun(embedded: InProcess) -> None:
    """If no worker leases a run before its expires_at, then the first worker that
    leases it afterwards records ExecutionExpired instead of running it (the run is
    discarded, its handler never called, its queue entry gone); a run whose
    expires_at is still ahead runs as ever."""
    handler = Decides()

    def expiring(seconds: int) -> Execution:
        spec = ExecutionSpec(handler="tests.decides", expires_at=START + timedelta(seconds=seconds))
        execution = Executions(embedded.container.ledger).run(
            spec, key=uuid.uuid4().hex, at=embedded.clock(), by=actor()
        )
        embedded.sync()
        return execution

    async def scenario() -> None:
        late, timely = expiring(10), expiring(3600)
        embedded.clock.advance(timedelta(seconds=10))
        worker = embedded.worker({"tests.decides": handler})
        async with embedded.running(worker):
            await embedded.until(lambda: embedded.status(late.id) is ExecutionStatus.DISCARDED)
            await embedded.until(lambda: embedded.status(timely.id) is ExecutionStatus.COMPLETED)
            await embedded.until(lambda: embedded.queued(late.id) is None)
        assert embedded.names(late.id) == ["Enqueued", "Expired"]
        assert handler.calls == 1  # the timely run only
        assert worker.stats.expired == 1
        assert counted(worker, "tests.decides", "expired") == 1

    asyncio.run(scenario())


def test_an_idle_worker_is_woken_by_new_work_not_by_its_poll(embedded: InProcess) -> None:
    """If a run becomes ready while a worker idles, then the queue projection's ring
    wakes the worker, which leases the run at once, long before its next poll."""
    signal = embedded.container.signal
    embedded.projection.signal = signal
    worker = embedded.worker(idle_poll=60.0)
    worker.signal = signal

    async def scenario() -> None:
        async with embedded.running(worker):
            await asyncio.sleep(0.2)  # the worker looked, found nothing, and waits
            began = time.monotonic()
            execution = embedded.run("test.echo", n=1)  # projected: the ring
            await embedded.until(
                lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED,
                within=5,
                follow=False,
            )
            assert time.monotonic() - began < 5

    asyncio.run(scenario())


class BrokenBell:
    """A bell whose every ring fails, as one on a Redis that is down."""

    def ring(self, _names: object) -> None:
        raise ConnectionError("the bell's server is gone")


def test_a_ring_that_fails_leaves_the_page_applied(embedded: InProcess) -> None:
    """If the bell cannot ring (its store is down), then the queue projection still
    applies the page and moves on: the run is queued, and a worker's poll finds it."""
    embedded.projection.signal = cast("Any", BrokenBell())
    with capture_logs() as logs:
        execution = embedded.run("test.echo", n=1)
    assert embedded.queued(execution.id) is QueueState.PENDING
    assert embedded.projection.position == embedded.container.ledger.recorder.max_notification_id()
    assert len(logged(logs, "queue.ring_failed")) == 1

    async def scenario() -> None:
        async with embedded.running(embedded.worker()):
            await embedded.until(
                lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED, follow=False
            )

    asyncio.run(scenario())
