"""The worker: leases executions into a bounded number of slots and runs their handlers.

A worker leases as many executions as it has free slots in one queue call per queue,
records the leases through the group-commit writer (one batched save), and runs each
handler as an asyncio task with the job's timeout. A heartbeat thread extends the
leases of running executions, so it keeps beating even when a handler blocks the event
loop; a lease it cannot extend (cancelled, or expired and taken elsewhere) signals the
handler to stop. Outcomes carry the lease id: a report from a worker whose lease was
lost is rejected by the Execution aggregate and counted, never applied.

A store outage stops nothing that runs: the lease loop and the heartbeat back off and
try again (the process's dependency tracker says so once), running handlers go on, and
their outcomes wait in the writer until the store answers.
"""

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar, assert_never

import structlog

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.errors import (
    ConflictError,
    DomainError,
    InvalidDefinitionError,
    NotFoundError,
    StaleLeaseError,
)
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.ids import random_uuid
from jobledger.domain.json_values import check_json
from jobledger.domain.progress import ProgressPolicy
from jobledger.domain.run_logs import LogLine, LogPolicy
from jobledger.infra.background import Background
from jobledger.infra.logging import ATTEMPT_SINK, capture_attempt_lines, exception_text
from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import OUTAGE_ERRORS, POSTGRESQL, REDIS, DependencyHealth
from jobledger.infra.presence import Presence, WorkerInfo
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import Held
from jobledger.projections.log.streams import load_many
from jobledger.projections.queue.backend import Lease, QueueBackend, Throttle, decode_spec
from jobledger.projections.queue.signal import Listening, WorkSignal
from jobledger.runtime.attempt_lines import AttemptLines
from jobledger.runtime.attempt_progress import AttemptProgress
from jobledger.runtime.breakers import Breakers
from jobledger.runtime.handlers.base import CircuitOpenError, HandlerContext
from jobledger.runtime.handlers.registry import HandlerRegistry, missing_handler_error
from jobledger.runtime.loop_bridge import FutureBridge
from jobledger.runtime.outcomes import (
    Cancelled,
    Completed,
    Deferred,
    Dropped,
    Failed,
    FailedPermanently,
    Outcome,
    Report,
    Snoozed,
    decided,
)

T = TypeVar("T")
log = structlog.get_logger(__name__)
_handler_log = structlog.get_logger("jobledger.handler")

# A hand-back's reason: the run is ready again at once, on another worker.
SHUTTING_DOWN = "worker shutting down"


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    slots: int = 4
    lease_ttl: timedelta = timedelta(seconds=30)
    idle_poll: float = 0.05
    grace: float = 10.0  # on shutdown, how long running jobs may take to finish
    defer_when_open: timedelta = timedelta(seconds=30)
    progress: ProgressPolicy = field(default_factory=ProgressPolicy)
    logs: LogPolicy = field(default_factory=LogPolicy)
    # How often a running handler's lines are recorded (ADR 104).
    log_every: float = 1.0


@dataclass
class WorkerStats:
    leased: int = 0
    completed: int = 0
    failed: int = 0
    deferred: int = 0
    stale_reports: int = 0
    handed_back: int = 0
    cancelled: int = 0
    snoozed: int = 0
    discarded: int = 0
    expired: int = 0  # not leased by their expires_at: discarded, never run


@dataclass
class _Running:
    execution: Execution
    lease: Lease
    context: HandlerContext
    task: "asyncio.Task[None] | None" = None
    lost: bool = False
    # Set once the handler has returned: the outcome is being recorded, and the lease
    # may leave the queue at any moment, so failing to extend it means nothing.
    finished: bool = False
    progress: AttemptProgress | None = None
    lines: AttemptLines | None = None  # the handler's log lines not yet recorded


@dataclass
class Worker:
    """One worker process's slots; see the module docstring."""

    ledger: Ledger
    writer: GroupCommitWriter
    queue: QueueBackend
    handlers: HandlerRegistry
    worker_id: str = field(default_factory=lambda: f"worker-{uuid.uuid4().hex[:8]}")
    config: WorkerConfig = field(default_factory=WorkerConfig)
    now: Clock = utc_now
    stats: WorkerStats = field(default_factory=WorkerStats)
    running: dict[uuid.UUID, _Running] = field(default_factory=dict)
    breakers: Breakers | None = None
    presence: Presence | None = None
    metrics: Metrics = field(default_factory=Metrics)
    health: DependencyHealth = field(default_factory=lambda: DependencyHealth("worker"))
    # Rung when runs become ready on this worker's queues: an idle worker leases at once
    # instead of at its next poll.
    signal: WorkSignal | None = None
    # Set when a slot frees, so a full worker leases again at once instead of after a
    # poll interval (which would cap throughput at slots / idle_poll).
    _slot_freed: asyncio.Event = field(default_factory=asyncio.Event)
    # Set by the signal's thread when runs became ready (``signal``).
    _work_ready: asyncio.Event = field(default_factory=asyncio.Event)
    # Runs whose handler has returned and whose outcome is submitted but not yet saved:
    # their slots are free already, so the next lease round's save carries their
    # outcomes with the new leases (one commit), and no slot waits for the writer's
    # delay. They stay in ``running`` (the heartbeat extends their leases) until saved.
    _settling: int = 0
    # Completed leases to acknowledge in the queue; sent with the next lease call, so a
    # completion costs no thread hop of its own. The projection removes the entry when
    # it reads ExecutionCompleted anyway: the ack only makes that immediate.
    _acks: list[Lease] = field(default_factory=list)
    # Threads for handlers' blocking code (plain-function handlers), apart from the
    # threads the worker's own store calls use: twice the slots, so a run that outlived
    # its timeout in a thread that cannot be stopped leaves the next one a thread.
    _handler_threads: ThreadPoolExecutor | None = None
    # The connection the lease rounds read the leased executions on (PostgreSQL): kept,
    # so a round pays no pool checkout and no check query. Rounds run one at a time.
    _reads: Held | None = None
    # How the loop awaits the writer's saves of outcomes: one wake-up for a batch.
    _saves: FutureBridge | None = None

    def report_presence(self) -> None:
        if self.presence is None:
            return
        self.presence.report(
            WorkerInfo(
                worker_id=self.worker_id,
                queues=self.config.queues,
                slots=self.config.slots,
                running=tuple(self.running),
                last_heartbeat=self.now(),
            )
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Lease and run until ``stop`` is set, then shut down gracefully."""
        self._handler_threads = ThreadPoolExecutor(
            max_workers=2 * self.config.slots, thread_name_prefix=f"{self.worker_id}-handler"
        )
        self._reads = self.ledger.held_connection()
        self._saves = FutureBridge(asyncio.get_running_loop())
        capture_attempt_lines()
        heartbeat = _Heartbeat(self)
        heartbeat.start()
        listening = self._listen(asyncio.get_running_loop())
        recording = asyncio.create_task(self._record_lines_every(stop))
        # Listed at once, not at the first heartbeat; during an outage, at a later one.
        with contextlib.suppress(*OUTAGE_ERRORS):
            await asyncio.to_thread(self.report_presence)
        log.info("worker.started", worker_id=self.worker_id, slots=self.config.slots)
        try:
            while not stop.is_set():
                self._slot_freed.clear()
                self._work_ready.clear()
                try:
                    if await self._fill_slots():
                        continue
                except OUTAGE_ERRORS as error:
                    await _wait(stop, self._outage_pause(error))
                    continue
                if self._busy() >= self.config.slots:
                    await _wait(stop, self.config.idle_poll, also=self._slot_freed)
                else:
                    await _wait(stop, self.config.idle_poll, also=self._work_ready)
            await self._shut_down()
        finally:
            recording.cancel()
            if listening is not None:
                await asyncio.to_thread(listening.close)
            heartbeat.stop()
            # Threads still blocked in handler code were handed back already.
            self._handler_threads.shutdown(wait=False, cancel_futures=True)
            if self._reads is not None:
                self._reads.close()
            await asyncio.to_thread(self._leave)
            log.info("worker.stopped", worker_id=self.worker_id, **vars(self.stats))

    def _listen(self, loop: asyncio.AbstractEventLoop) -> Listening | None:
        """Listen for runs becoming ready on this worker's queues, if it has a signal."""
        if self.signal is None:
            return None
        ready = self._work_ready

        def woken() -> None:
            loop.call_soon_threadsafe(ready.set)

        return self.signal.listen(self.config.queues, woken)

    def _outage_pause(self, error: BaseException) -> float:
        """The pause before trying again after ``error``, if it means a store is down;
        any other error is raised again."""
        pause = self.health.report(error, self.health.clock())
        if pause is None:
            raise error
        return pause

    def _leave(self) -> None:
        if self.presence is None:
            return
        try:
            self.presence.leave(self.worker_id)
        except OUTAGE_ERRORS as error:
            # Unreachable Redis: the entry ages out of the live list by itself.
            self._outage_pause(error)

    # ---- leasing --------------------------------------------------------------------

    async def _fill_slots(self) -> int:
        free = self.config.slots - self._busy()
        if free <= 0:
            return 0
        # One thread hop for the queue call and the batched save.
        recorded = await asyncio.to_thread(self._lease_and_record, free)
        for running in recorded:
            self.running[running.execution.id] = running
            running.task = asyncio.create_task(self._execute(running))
        self.metrics.slots_in_use.set(self._busy())
        return len(recorded)

    def _busy(self) -> int:
        """Slots taken: the runs not yet settling (see ``_settling``)."""
        return len(self.running) - self._settling

    def _lease_and_record(self, free: int) -> list[_Running]:
        leases, throttled = self._lease(free)
        self.health.succeeded(REDIS, self.health.clock())
        if throttled:
            self._note_throttled(throttled)
        if not leases:
            if self._settling:
                self.writer.flush()  # no lease to carry them: the outcomes go now
            return []
        try:
            ids = [lease.execution_id for lease in leases]
            executions = load_many(self.ledger, Execution, ids, self._reads)
        except Exception:
            # The log has not heard of these leases: hand them back now rather than
            # leave them to expire (best effort: the recovery settles them anyway).
            with contextlib.suppress(Exception):
                for lease in leases:
                    self._give_back(lease)
            raise
        self.health.succeeded(POSTGRESQL, self.health.clock())
        return self._record_leases(leases, executions)

    def _lease(self, free: int) -> tuple[list[Lease], list[Throttle]]:
        # Swap first: the event loop may append while this thread sends. The finished
        # runs go with the first round, in its round trip.
        acks, self._acks = self._acks, []
        leases: list[Lease] = []
        throttled: list[Throttle] = []
        for name in self.config.queues:
            wanted = free - len(leases)
            if wanted <= 0:
                break
            lease_ids = [random_uuid() for _ in range(wanted)]
            taken = self.queue.lease_round(
                name, lease_ids=lease_ids, ttl=self.config.lease_ttl, now=self.now(), acks=acks
            )
            acks = []
            leases += taken.leases
            throttled += taken.throttled
        if acks:
            self.queue.ack_many(acks)
        return leases, throttled

    def _note_throttled(self, throttled: list[Throttle]) -> None:
        """Record once per run that it waited for a limit (the queue reports each run
        once). Best effort: a run that started or changed meanwhile is left as it is,
        and a store that fails here loses the note, never a lease."""
        try:
            ids = [t.execution_id for t in throttled]
            executions = load_many(self.ledger, Execution, ids, self._reads)
        except OUTAGE_ERRORS:
            log.warning("worker.throttle_not_recorded", count=len(throttled))
            return
        now = self.now()
        for throttle in throttled:
            execution = executions.get(throttle.execution_id)
            if execution is None:
                continue
            try:
                execution.throttle(kind=throttle.kind, limit=throttle.key, at=now)
            except DomainError:
                continue
            self.writer.submit(execution)
            self.metrics.limit_throttled.labels(kind=throttle.kind).inc()
            log.info(
                "worker.throttled",
                execution_id=str(throttle.execution_id),
                kind=throttle.kind,
                limit=throttle.key,
            )

    def _record_leases(
        self, leases: list[Lease], executions: dict[uuid.UUID, Execution]
    ) -> list[_Running]:
        """One batched save for every lease; a lease the log refuses goes back."""
        prepared: list[tuple[_Running, Any]] = []
        expiring: list[tuple[Lease, str, Any]] = []
        now = self.now()
        for lease in leases:
            execution = executions.get(lease.execution_id)
            if execution is not None and execution.expired_by(now):
                future = self._expire(lease, execution, now)
                if future is not None:
                    expiring.append((lease, execution.spec.handler, future))
                continue
            running = self._prepare(lease, execution)
            if running is not None:
                prepared.append((running, self.writer.submit(running.execution)))
        if prepared or expiring:
            # The whole batch is in: save it now rather than after the writer's delay.
            self.writer.flush()
        for lease, handler, future in expiring:
            self._settle_expiry(lease, handler, future)
        recorded: list[_Running] = []
        for running, future in prepared:
            try:
                future.result()
            except ConflictError:
                self._give_back(running.lease)
                continue
            recorded.append(running)
        self.stats.leased += len(recorded)
        self._count_leases(recorded)
        return recorded

    def _expire(self, lease: Lease, execution: Execution, now: datetime) -> Any:  # noqa: ANN401 (the writer's future)
        """Discard a leased run whose ``expires_at`` passed before this lease: it is not
        run. The same lease rules as a start: a lease of a state the log has left
        behind goes back."""
        try:
            _check_lease_current(lease, execution, now)
            execution.expire(at=now)
        except DomainError as error:
            log.info("worker.lease_refused", execution_id=str(execution.id), error=str(error))
            self._give_back(lease)
            return None
        return self.writer.submit(execution)

    def _settle_expiry(self, lease: Lease, handler: str, future: Any) -> None:  # noqa: ANN401 (the writer's future)
        try:
            future.result()
        except ConflictError:
            self._give_back(lease)
            return
        self._acks.append(lease)  # the run left the queue for good
        self.stats.expired += 1
        self.metrics.labelled(self.metrics.completions, handler, "expired").inc()
        log.info("worker.execution_expired", execution_id=str(lease.execution_id))

    def _count_leases(self, recorded: list[_Running]) -> None:
        self.metrics.leases.inc(len(recorded))
        now = self.now()
        for running in recorded:
            # ready_at is when it became due: the occurrence, or a back-off's or deferral's end.
            waited = (now - running.execution.ready_at).total_seconds()
            self.metrics.schedule_to_start.observe(max(waited, 0.0))

    def _prepare(self, lease: Lease, execution: Execution | None) -> _Running | None:
        try:
            if execution is None:
                raise NotFoundError(f"no execution with id {lease.execution_id}")
            _check_lease_current(lease, execution, self.now())
            execution.lease(
                worker_id=self.worker_id, lease_id=lease.lease_id, lease_expires_at=lease.deadline
            )
        except DomainError as error:
            log.info(
                "worker.lease_refused",
                execution_id=str(lease.execution_id),
                worker_id=self.worker_id,
                error=str(error),
            )
            self._give_back(lease)
            return None
        spec = decode_spec(lease.spec)
        context = HandlerContext(
            execution_id=execution.id,
            job_id=spec.job_id,
            attempt=execution.lease_attempt,
            lease_deadline=lease.deadline,
            payload=dict(spec.payload),
            scheduled_for=execution.scheduled_for,
            upstream_results=dict(execution.upstream_results or {}),
            workflow_id=execution.workflow_id,
            step=execution.step,
            threads=self._handler_threads,
            # Every line about this attempt, the handler's own included, names it.
            log=_handler_log.bind(
                execution_id=str(execution.id),
                job_id=str(spec.job_id) if spec.job_id else None,
                attempt=execution.lease_attempt,
                worker_id=self.worker_id,
            ),
        )
        running = _Running(execution, lease, context)
        running.progress = AttemptProgress(
            running,
            self.writer,
            self.presence,
            self.now,
            self.config.progress,
            live_ttl=2 * self.config.lease_ttl,
        )
        context.progress_sink = running.progress
        running.lines = AttemptLines(self.config.logs, self.now)
        return running

    def _give_back(self, lease: Lease) -> None:
        # The log disagrees with the queue: let the projection's next write settle it.
        self.queue.release(lease.queue, lease.execution_id, lease.lease_id, ready_at=self.now())

    # ---- running --------------------------------------------------------------------

    async def _execute(self, running: _Running) -> None:
        try:
            await self._report(running, await self._attempt(running))
        finally:
            self.running.pop(running.execution.id, None)
            self.metrics.slots_in_use.set(self._busy())
            self._slot_freed.set()
            # The run and its progress reporter refer to each other: unlinked, a
            # finished run is freed at once, not left to the cyclic collector (about
            # twenty objects a job, a tenth of the worker's time in its passes).
            running.progress = running.context.progress_sink = None

    async def _record_lines_every(self, stop: asyncio.Event) -> None:
        """Every ``log_every``, the lines of each running handler so far (one task for
        all runs: a run that logs nothing costs nothing here)."""
        while not stop.is_set():
            await _wait(stop, self.config.log_every)
            for running in list(self.running.values()):
                if running.finished or running.lines is None or running.progress is None:
                    continue  # a finished run's last lines go with its outcome
                await running.progress.record_lines(running.lines)

    async def _attempt(self, running: _Running) -> Report:
        """Run the handler under its breaker and timeout; what it came to."""
        execution, context = running.execution, running.context
        name = execution.spec.handler
        handler = self.handlers.get(name)
        if handler is None:
            return Failed(missing_handler_error(name))
        started = time.monotonic()
        timeout = execution.spec.timeout.total_seconds()
        try:
            with self._breaker(name):
                try:
                    # In this task: wait_for would run the handler in a task of its own.
                    async with asyncio.timeout(timeout):
                        result = await _logged_to(running.lines, handler(context))
                finally:
                    # Inside the breaker: a run the open breaker refused took no time.
                    self._observe_duration(name, started)
        except CircuitOpenError as error:
            return Deferred(str(error), ready_at=self.now() + self.config.defer_when_open)
        except TimeoutError:
            context.cancelled.set()
            return Failed(f"timed out after {timeout:g} s")
        except Exception as error:
            # A snooze, a discard or a permanent failure is the handler's decision.
            outcome = decided(error)
            if outcome is None:
                # Its traceback: the worker's stderr's line, and the attempt's last one.
                context.log.warning("handler.raised", exc_info=error)
                if running.lines is not None:
                    shown = {"exception": exception_text(error)}
                    running.lines.write("warning", "handler.raised", shown)
            return outcome or Failed(f"{type(error).__name__}: {error}")
        refused = self._storable(result)
        if refused is not None:
            return Failed(refused)
        return Completed(result, duration=timedelta(seconds=time.monotonic() - started))

    def _storable(self, result: object) -> str | None:
        """Why the log cannot keep ``result`` (the attempt then fails with it), or None:
        a result goes into an event and every read of the run, like a payload."""
        if not isinstance(result, dict):
            return f"the handler returned a {type(result).__name__}; return a JSON object"
        try:
            check_json(result, "result", max_bytes=self.ledger.limits.max_payload_bytes)
        except InvalidDefinitionError as error:
            return f"the handler's result cannot be stored: {error}"
        return None

    def _observe_duration(self, handler: str, started: float) -> None:
        metrics = self.metrics
        metrics.labelled(metrics.execution_duration, handler).observe(time.monotonic() - started)

    def _breaker(self, handler: str) -> contextlib.AbstractContextManager[None]:
        if self.breakers is None:
            return contextlib.nullcontext()
        return self.breakers.guard(handler)

    async def _report(self, running: _Running, report: Report) -> None:
        """Record the report; on a conflict reload once, so a lost lease is told apart
        from an unrelated change (the aggregate rejects the stale report). An outage
        only delays it: the report is tried again on a fresh copy until the store
        answers (the lease rules then decide what a late report means)."""
        running.finished = True
        # A progress report whose save failed left the worker's copy behind the log.
        kept = running.progress is None or await running.progress.settled()
        lines, dropped = ([], 0) if running.lines is None else running.lines.take()
        conflicts, reload = 0, not kept
        while conflicts < 2:  # noqa: PLR2004 (the first try, and one after a reload)
            execution = running.execution
            try:
                if reload:
                    execution = await asyncio.to_thread(
                        self.ledger.get_execution, running.execution.id
                    )
                _with_lines(execution, running.lease, lines, dropped)
                self._apply(execution, running.lease, report)
                await self._save_outcome(execution)
            except StaleLeaseError:
                if execution.status is ExecutionStatus.CANCELLED:
                    self._recorded(running, Cancelled(), execution)
                    return
                break
            except ConflictError:
                conflicts, reload = conflicts + 1, True
                continue
            except OUTAGE_ERRORS as error:
                # The store is down: wait, then try again on a fresh copy.
                await asyncio.sleep(self._outage_pause(error))
                reload = True
                continue
            self._recorded(running, report, execution)
            return
        self._count_stale(running, report)

    async def _save_outcome(self, execution: Execution) -> None:
        """Submit an outcome and free its slot while it is saved: the lease round this
        wakes saves it with the round's leases, in one commit."""
        future = self.writer.submit(execution)
        self._settling += 1
        self._slot_freed.set()
        try:
            await (asyncio.wrap_future(future) if self._saves is None else self._saves.wait(future))
        finally:
            self._settling -= 1

    def _recorded(self, running: _Running, outcome: Outcome, execution: Execution) -> None:
        self._count(outcome, execution)
        _log_outcome(running.context.log, outcome, execution)
        if isinstance(outcome, Completed | Dropped):
            self._acks.append(running.lease)

    def _count_stale(self, running: _Running, report: Report) -> None:
        self.stats.stale_reports += 1
        self.metrics.stale_reports.inc()
        running.context.log.warning("worker.stale_report", outcome=report.kind)

    def _apply(self, execution: Execution, lease: Lease, report: Report) -> None:
        lease_id = lease.lease_id
        match report:
            case Completed(result=result, duration=duration):
                execution.complete(lease_id=lease_id, duration=duration, result=result)
            case Deferred(reason=reason, ready_at=ready_at):
                execution.defer(lease_id=lease_id, reason=reason, ready_at=ready_at)
            case Snoozed(reason=reason, delay=delay):
                execution.snooze(lease_id=lease_id, reason=reason, delay=delay, at=self.now())
            case Dropped(reason=reason):
                execution.drop(lease_id=lease_id, reason=reason)
            case FailedPermanently(error=error):  # before Failed, which it is too
                execution.fail_permanently(lease_id=lease_id, error=error)
            case Failed(error=error):
                execution.fail(
                    lease_id=lease_id,
                    error=error,
                    at=self.now(),
                    rand=random.random(),  # noqa: S311 (jitter)
                )
            case _:
                assert_never(report)

    def _send_acks(self) -> None:
        # Swap first: the event loop may append while this thread sends.
        acks, self._acks = self._acks, []
        if acks:
            self.queue.ack_many(acks)

    def _count(self, outcome: Outcome, execution: Execution) -> None:
        label = self._tally(outcome, execution)
        metrics = self.metrics
        metrics.labelled(metrics.completions, execution.spec.handler, label).inc()

    def _tally(self, outcome: Outcome, execution: Execution) -> str:
        """Count ``outcome`` in the stats and its own counter; its metrics label."""
        stats, metrics = self.stats, self.metrics
        match outcome:
            case Completed():
                stats.completed += 1
                return "completed"
            case Deferred():
                stats.deferred += 1
                metrics.deferrals.inc()
                return "deferred"
            case Failed() if _dead_lettered(execution):
                stats.failed += 1
                metrics.dead_letters.inc()
                return "dead_lettered"
            case Snoozed() | Dropped():
                return self._tally_decision(outcome)
            case Failed():
                stats.failed += 1
                metrics.retries.inc()
                return "retried"
            case Cancelled():
                stats.cancelled += 1
                return "cancelled"
            case _:
                assert_never(outcome)

    def _tally_decision(self, outcome: Snoozed | Dropped) -> str:
        if isinstance(outcome, Snoozed):
            self.stats.snoozed += 1
            return "snoozed"
        self.stats.discarded += 1
        return "discarded"

    # ---- shutdown -------------------------------------------------------------------

    async def _shut_down(self) -> None:
        """Stop leasing; let running jobs finish within the grace; hand the rest back."""
        tasks = [r.task for r in self.running.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=self.config.grace)
        with contextlib.suppress(Exception):  # acks only speed up what the projection does
            await asyncio.to_thread(self._send_acks)
        for running in list(self.running.values()):
            running.context.cancelled.set()
            if running.task is not None:
                running.task.cancel()
            await self._hand_back(running)

    async def _hand_back(self, running: _Running) -> None:
        running.finished = True
        execution, lease = running.execution, running.lease
        try:
            # As an outcome's report: on a fresh copy if a progress save failed.
            progress, grace = running.progress, self.config.grace
            if progress is not None and not await asyncio.wait_for(progress.settled(), grace):
                execution = await asyncio.to_thread(self.ledger.get_execution, execution.id)
            if running.lines is not None:
                _with_lines(execution, lease, *running.lines.take())
            self._apply(execution, lease, Deferred(SHUTTING_DOWN, ready_at=self.now()))
            # Bounded: during an outage the writer would wait for the store, and a
            # worker asked to stop must stop.
            await asyncio.wait_for(self.writer.save_async(execution), self.config.grace)
        except Exception as error:  # noqa: BLE001 (the lease expires and is recovered)
            running.context.log.warning("worker.hand_back_failed", error=str(error))
            return
        # Back in the queue now, not when the projection gets to the event.
        with contextlib.suppress(Exception):  # else the projection does it
            await asyncio.to_thread(self._give_back, lease)
        self.stats.handed_back += 1
        self.metrics.completions.labels(handler=execution.spec.handler, outcome="handed_back").inc()
        self.running.pop(execution.id, None)
        self.metrics.slots_in_use.set(self._busy())


async def _logged_to(lines: AttemptLines | None, call: Awaitable[T]) -> T:
    """Await the handler's ``call`` with what it logs going to its attempt's ``lines``
    (ADR 104): only the handler's own code, not the breaker or the worker around it."""
    sink = ATTEMPT_SINK.set(None if lines is None else lines.write)
    try:
        return await call
    finally:
        ATTEMPT_SINK.reset(sink)


def _with_lines(execution: Execution, lease: Lease, lines: list[LogLine], dropped: int) -> None:
    """The handler's last lines, recorded in the outcome's save (before it), while the
    lease is current; a stale lease's lines are left out, as its outcome is."""
    if lines or dropped:
        with contextlib.suppress(DomainError):
            execution.record_log(lease_id=lease.lease_id, lines=lines, dropped=dropped)


def _dead_lettered(execution: Execution) -> bool:
    """Whether a recorded failure spent the last attempt of the budget."""
    return execution.status is ExecutionStatus.DEAD_LETTERED


def _check_lease_current(lease: Lease, execution: Execution, now: datetime) -> None:
    """A queue lease stands for the state of the execution the queue showed, at the time
    it was taken. A worker that stalled between the two steps (a pause, a slow store)
    must not record it on a later state, which may be due later (a retry's back-off),
    nor once the lease has run out: the leader would count that attempt as failed."""
    if execution.version != lease.version:
        raise ConflictError(
            f"the queue leased version {lease.version} of execution {execution.id}, but the"
            f" log is at version {execution.version}; the queue catches up by itself"
        )
    if lease.deadline <= now:
        raise ConflictError(f"the lease of execution {execution.id} ran out before it was recorded")


def _log_outcome(
    logger: Any,  # noqa: ANN401 (a structlog bound logger)
    outcome: Outcome,
    execution: Execution,
) -> None:
    """One line per recorded outcome; a completion only at debug, as there are many."""
    handler = execution.spec.handler
    match outcome:
        case Completed():
            logger.debug("worker.execution_completed", handler=handler)
        case Deferred(reason=reason):
            logger.info("worker.execution_deferred", handler=handler, reason=reason)
        case Failed(error=error) if _dead_lettered(execution):
            logger.error("worker.execution_dead_lettered", handler=handler, error=error)
        case Snoozed(reason=reason):
            ready_at = execution.ready_at.isoformat()
            logger.info(
                "worker.execution_snoozed", handler=handler, reason=reason, ready_at=ready_at
            )
        case Dropped(reason=reason):
            logger.info("worker.execution_discarded", handler=handler, reason=reason)
        case Failed(error=error):
            retry_at = execution.ready_at.isoformat()
            logger.warning(
                "worker.execution_failed", handler=handler, error=error, retry_at=retry_at
            )
        case Cancelled():
            logger.info("worker.execution_cancelled", handler=handler)
        case _:
            assert_never(outcome)


class _Heartbeat(Background):
    """Extends running leases from a thread of its own, every third of the lease ttl."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        super().__init__("heartbeat")

    def _run(self) -> None:
        interval = self._worker.config.lease_ttl.total_seconds() / 3
        health = self._worker.health
        while not self._stopping.wait(interval):
            # Every beat is a try of its own: during an outage, once per interval.
            try:
                self.beat()
            except Exception as error:
                if health.report(error, health.clock()) is None:
                    log.exception("worker.heartbeat_failed", worker_id=self._worker.worker_id)
                continue
            health.succeeded(REDIS, health.clock())

    def beat(self) -> None:
        worker = self._worker
        worker.report_presence()
        if worker.breakers is not None:
            # Here, off the event loop: a shared breaker's state is read from Redis.
            worker.metrics.observe_breakers(worker.breakers.states())
        deadline = worker.now() + worker.config.lease_ttl
        for running in list(worker.running.values()):
            # A finished run is still extended until its outcome is saved: a slow save
            # must not let the lease expire under a run that succeeded.
            lease = running.lease
            held = worker.queue.extend(
                lease.queue, lease.execution_id, lease.lease_id, deadline=deadline
            )
            # A run that finished meanwhile may have left the queue already: not lost.
            if not held and not running.lost and not running.finished and _queue_kept(worker):
                running.lost = True
                running.context.cancelled.set()
                running.context.log.warning("worker.lease_lost")


def _queue_kept(worker: Worker) -> bool:
    """False while the queue has lost its data (Redis came back empty) and the projection
    has not rebuilt it yet, or while a rebuild loads it: a lease missing then says
    nothing about who holds it."""
    meta = worker.queue.read_meta()
    return meta is not None and not meta.loading


async def _wait(stop: asyncio.Event, seconds: float, also: asyncio.Event | None = None) -> None:
    """Until ``stop`` (or ``also``) is set, or ``seconds`` pass."""
    waiters = [asyncio.ensure_future(stop.wait())]
    if also is not None:
        waiters.append(asyncio.ensure_future(also.wait()))
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
