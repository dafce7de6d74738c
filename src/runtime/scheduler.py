"""The scheduler: the leader fires due jobs in batched saves and recovers lost leases.

Only the leader acts, and it checks its leadership before every job, so a leader that
lost its lock (or its deadline) stops within one job. Fencing does not depend on that:
a fire from a stale copy of a job, or a second fire of an occurrence, is a version
conflict in the store, counted here and skipped (ADR 9).
"""

import random
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

import structlog

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.errors import ConflictError, DomainError
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.firing import (
    Fire,
    Miss,
    OpenRuns,
    carry_out,
    plan_due,
    superseded,
    superseded_reason,
)
from jobledger.domain.job import Job
from jobledger.domain.policies import OverlapPolicy
from jobledger.infra.background import Background
from jobledger.infra.leadership import Leadership
from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import OUTAGE_ERRORS, POSTGRESQL, DependencyHealth
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.reader import Wakeup
from jobledger.projections.log.streams import load_many
from jobledger.projections.queue.backend import QueueBackend, QueueChange, QueueState
from jobledger.projections.queue.checkpoint import Checkpoint
from jobledger.projections.queue.gauges import observe_queue
from jobledger.projections.queue.projection import previous_item
from jobledger.projections.read_models.job_index import JobIndex
from jobledger.runtime.job_cache import JobCache
from jobledger.runtime.releases import ReleaseLoop

log = structlog.get_logger(__name__)

INDEX_RESOLUTION = timedelta(milliseconds=1)


@dataclass
class TickReport:
    fired: int = 0
    missed: int = 0
    conflicts: int = 0
    jobs: int = 0
    acted: bool = True


@dataclass
class SchedulerStats:
    """Running totals: what a metrics exporter and the tests read."""

    ticks: int = 0
    looks: int = 0  # ticks that read the job index
    fired: int = 0
    missed: int = 0
    conflicts: int = 0
    leases_expired: int = 0
    queue_repairs: int = 0


@dataclass(frozen=True)
class SchedulerConfig:
    batch: int = 500  # due jobs looked at per tick
    grace: timedelta = timedelta(seconds=60)  # later than this, the misfire policy decides
    tick_interval: float = 0.05
    recover_interval: float = 1.0
    job_cache: int = 10_000  # jobs the leader keeps in memory between ticks (0: none)
    # A tick with nothing due loads the jobs due this far ahead that memory lacks, at
    # most every half of it, so that the tick that fires them finds them held.
    preload: timedelta = timedelta(seconds=60)
    # While a listener says when the log moves, a tick reads the job index only if it
    # moved, a fire is due, or this many seconds passed since the last read (ADR 102).
    look_every: float = 1.0


# The overlap policies that look at a job's open runs before it fires.
_COUNTED = frozenset(
    {OverlapPolicy.SKIP_IF_RUNNING, OverlapPolicy.QUEUE_ONE, OverlapPolicy.CANCEL_OTHER}
)
# Who cancels the runs a cancel_other fire replaces.
SCHEDULER_ACTOR = "scheduler"


def _open_runs(runs: list[tuple[UUID, QueueState]]) -> OpenRuns:
    open_ids = tuple(run for run, state in runs if state is not QueueState.DEAD)
    states = [state for _run, state in runs]
    return OpenRuns(
        pending=states.count(QueueState.PENDING),
        running=states.count(QueueState.LEASED),
        ids=open_ids,
    )


@dataclass(frozen=True)
class _Submitted:
    future: Future[None]
    job: Job
    steps: list[Fire | Miss]


class Scheduler:
    """Fires due jobs and recovers expired leases, while it leads."""

    def __init__(
        self,
        ledger: Ledger,
        writer: GroupCommitWriter,
        index: JobIndex,
        leadership: Leadership,
        *,
        queue: QueueBackend | None = None,
        checkpoint: Checkpoint | None = None,
        config: SchedulerConfig = SchedulerConfig(),
        metrics: Metrics | None = None,
        releases: ReleaseLoop | None = None,
        changes: Wakeup | None = None,
    ) -> None:
        self.ledger = ledger
        # What follows a run's end (downstream jobs, workflow steps, buffered
        # backfills): a follower of its own, started and stopped with the service.
        self.releases = releases
        self.writer = writer
        self.index = index
        self.leadership = leadership
        self.queue = queue
        self.checkpoint = checkpoint
        self.config = config
        self.stats = SchedulerStats()
        self.metrics = metrics or Metrics()
        self._changes_counted = 0
        self.jobs = JobCache(ledger, size=config.job_cache)
        self._jobs_epoch: int | None = None  # the leadership term the cached jobs are of
        self._preloaded_at: datetime | None = None
        # Set by the releases' listener when the log moved: the index may have changed.
        self.changes = changes
        # The earliest next fire as of the last read of the index, and when (monotonic)
        # the next read is due even if nothing moved.
        self.next_due: datetime | None = None
        self._look_by = 0.0

    # ---- firing ---------------------------------------------------------------------

    def tick(self, now: datetime) -> TickReport:
        """Fire what is due at ``now``. Does nothing unless this scheduler leads."""
        if not self.leadership.is_leader():
            return TickReport(acted=False)
        self.stats.ticks += 1
        self._follow_term()
        if self._quiet(now):
            return TickReport()
        self.stats.looks += 1
        self.index.catch_up(self.jobs.saw)
        report = TickReport()
        due = self.index.due(now, limit=self.config.batch)
        pending = self._prepare_all(due, self.jobs.take(due) if due else {}, now)
        if pending:
            self.writer.flush()  # every fire of this tick is in: no need to wait for more
        for submitted in pending:
            self._settle(submitted, report)
        report.jobs = len(pending)
        if not due:
            self._preload(now)
        self.next_due = self.index.next_due()
        self._look_by = time.monotonic() + self.config.look_every
        return report

    def _quiet(self, now: datetime) -> bool:
        """Whether this tick may leave the index unread: a listener says when the log
        moves and it did not since the last read, no fire is due, and that read is
        recent. Without a listener every tick reads it."""
        releases = self.releases
        if self.changes is None or releases is None or not releases.listening:
            return False
        if self.changes.take() or time.monotonic() >= self._look_by:
            return False
        return self.next_due is None or now < self.next_due

    def _preload(self, now: datetime) -> None:
        """Hold the jobs due within the preload window (a tick with nothing due has the
        time): their tick then fires without loading them."""
        window = self.config.preload
        if self.config.job_cache <= 0 or window <= timedelta(0):
            return
        if self._preloaded_at is not None and now - self._preloaded_at < window / 2:
            return
        self._preloaded_at = now
        upcoming = self.index.due(now + window, limit=self.config.batch)
        self.jobs.preload(upcoming)

    def _follow_term(self) -> None:
        """A new leadership term starts with no job in memory: the jobs may have changed
        in any way while this scheduler did not lead."""
        epoch = self.leadership.epoch
        if epoch != self._jobs_epoch:
            self.jobs.clear("a new leadership term")
            self.index.forget()
            self._jobs_epoch = epoch
            self._preloaded_at = None
            self._look_by = 0.0

    def _prepare_all(
        self, due: list[UUID], jobs: dict[UUID, Job], now: datetime
    ) -> list[_Submitted]:
        """Plan and submit the fires of the due ``jobs``, in the index's order."""
        open_runs = self._open_runs(jobs.values())
        pending: list[_Submitted] = []
        for job_id in due:
            if not self.leadership.is_leader():
                break  # lost the lead mid-tick: stop at once, the new leader goes on
            job = jobs.pop(job_id, None)
            if job is None:
                continue
            item = self._prepare(job, now, open_runs.get(job_id, OpenRuns()))
            if item is None:
                self.jobs.give_back(job)  # nothing due after all (the index lagged)
            else:
                pending.append(item)
        for job in jobs.values():
            self.jobs.give_back(job)  # not looked at: as it was
        return pending

    def _prepare(self, job: Job, now: datetime, open_runs: OpenRuns) -> "_Submitted | None":
        steps = plan_due(job, now, open_runs=open_runs, grace=self.config.grace)
        if not steps:
            return None
        executions = carry_out(job, steps, leader_epoch=self.leadership.epoch, at=now)
        cancelled = self._cancel_superseded(superseded(job, steps, open_runs), steps)
        return _Submitted(self.writer.submit(job, *executions, *cancelled), job, steps)

    def _cancel_superseded(
        self, run_ids: tuple[UUID, ...], steps: list[Fire | Miss]
    ) -> list[Execution]:
        """Cancel the open runs a ``cancel_other`` fire replaces, in the fire's save: a
        run that ended meanwhile is left as it is (a conflict, if it ends while the save
        is made, and the next tick plans again)."""
        if not run_ids:
            return []
        fire = next(step for step in steps if isinstance(step, Fire))
        reason = superseded_reason(fire.scheduled_for)
        cancelled: list[Execution] = []
        for run in load_many(self.ledger, Execution, list(run_ids)).values():
            try:
                run.cancel(by=SCHEDULER_ACTOR, reason=reason)
            except DomainError:
                continue
            cancelled.append(run)
            log.info(
                "scheduler.run_superseded",
                execution_id=str(run.id),
                job_id=str(run.job_id),
                leader_epoch=self.leadership.epoch,
            )
        return cancelled

    def _settle(self, submitted: "_Submitted", report: TickReport) -> None:
        job_id = submitted.job.id
        try:
            submitted.future.result()
        except ConflictError:
            # Another scheduler fired first, or the job changed: its copy is stale, and
            # is not held again (the next tick loads the job afresh).
            report.conflicts += 1
            self.stats.conflicts += 1
            self.metrics.fire_conflicts.inc()
            log.info(
                "scheduler.fire_conflict", job_id=str(job_id), leader_epoch=self.leadership.epoch
            )
            return
        self.jobs.give_back(submitted.job)
        fired, missed = self._observe(submitted.steps)
        report.fired += fired
        report.missed += missed
        self.stats.fired += fired
        self.stats.missed += missed
        if missed:
            log.warning(
                "scheduler.fires_missed",
                job_id=str(job_id),
                count=missed,
                leader_epoch=self.leadership.epoch,
            )

    def _observe(self, steps: list[Fire | Miss]) -> tuple[int, int]:
        """Count saved steps in the metrics; returns (fired, missed occurrences)."""
        saved_at = utc_now()
        fired = missed = 0
        for step in steps:
            if isinstance(step, Fire):
                fired += 1
                self.metrics.fires.inc()
                lateness = (saved_at - step.scheduled_for).total_seconds()
                self.metrics.fire_lateness.observe(max(lateness, 0.0))
            else:
                missed += step.missed.count
                self.metrics.fires_missed.labels(reason=step.reason).inc(step.missed.count)
        return fired, missed

    def _open_runs(self, jobs: Iterable[Job]) -> dict[UUID, OpenRuns]:
        """The open runs of each job whose overlap policy counts them, in one query."""
        counted = [job.id for job in jobs if job.definition.overlap in _COUNTED]
        if self.checkpoint is None or not counted:
            return {}
        return {
            job_id: _open_runs(runs)
            for job_id, runs in self.checkpoint.open_runs_of(counted).items()
        }

    def observe(self, now: datetime) -> None:
        """The metrics loop: leader state, queue depths and projection lag."""
        leading = self.leadership.is_leader()
        self.metrics.leader.set(1 if leading else 0)
        changes = self.leadership.changes
        self.metrics.leader_changes.inc(changes - self._changes_counted)
        self._changes_counted = changes
        if leading and self.queue is not None:
            head = self.ledger.recorder.max_notification_id() or 0
            observe_queue(self.metrics, self.queue, now=now, head=head)

    # ---- recovery -------------------------------------------------------------------

    def recover(self, now: datetime, *, limit: int = 500) -> int:
        """Turn expired leases into failed attempts (retried or dead-lettered)."""
        backend = self.queue
        if backend is None or not self.leadership.is_leader():
            return 0
        expired = 0
        futures: list[Future[None]] = []
        for queue in sorted(backend.queues()):
            for execution_id, lease_id in backend.expired(queue, now=now, limit=limit):
                future = self._expire(backend, queue, execution_id, lease_id, now)
                if future is not None:
                    futures.append(future)
                    expired += 1
        for future in futures:
            try:
                future.result()
            except ConflictError:
                expired -= 1  # a late report or another recovery got there first
        self.stats.leases_expired += expired
        self.metrics.leases_expired.inc(expired)
        return expired

    def _expire(
        self, backend: QueueBackend, queue: str, execution_id: UUID, lease_id: UUID, now: datetime
    ) -> Future[None] | None:
        execution = self.ledger.get_execution(execution_id)
        if execution.status is ExecutionStatus.RUNNING and execution.lease_id == lease_id:
            log.info(
                "scheduler.lease_expired",
                execution_id=str(execution_id),
                job_id=str(execution.job_id) if execution.job_id else None,
                attempt=execution.lease_attempt,
                worker_id=execution.worker_id,
                leader_epoch=self.leadership.epoch,
            )
            execution.expire_lease(lease_id=lease_id, at=now, rand=random.random())  # noqa: S311 (jitter)
            return self.writer.submit(execution)
        self._repair(backend, queue, execution)
        return None

    def _repair(self, backend: QueueBackend, queue: str, execution: Execution) -> None:
        """The queue holds a lease the log never recorded: write what the log says."""
        item = previous_item(self.ledger, execution.id, execution.version + 1)
        change = QueueChange(
            execution_id=execution.id, queue=queue, version=execution.version, item=item
        )
        meta = backend.read_meta()
        # A store being loaded is rebuilt from the log anyway; a forced write would race it.
        if meta is not None and not meta.loading:
            backend.apply([change], epoch=meta.epoch, force=True)
            self.stats.queue_repairs += 1
            log.warning(
                "scheduler.queue_repaired",
                execution_id=str(execution.id),
                leader_epoch=self.leadership.epoch,
            )


class Loop(Protocol):
    """A follower the scheduler process runs beside its own loop."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class SchedulerService(Background):
    """The scheduler process: election, ticks and recovery on a loop until stopped."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        now: Clock = utc_now,
        health: DependencyHealth | None = None,
        also_run: Sequence[Loop] = (),
    ) -> None:
        self.scheduler = scheduler
        # Followers that act under the same leadership (the notifier): started after
        # the releases, stopped before them.
        self.also_run = tuple(also_run)
        self._now = now
        self._health = health or DependencyHealth("scheduler")
        super().__init__("scheduler")

    def start(self) -> None:
        super().start()
        if self.scheduler.releases is not None:
            self.scheduler.releases.start()
        for loop in self.also_run:
            loop.start()

    def stop(self) -> None:
        for loop in reversed(self.also_run):
            loop.stop()
        if self.scheduler.releases is not None:
            self.scheduler.releases.stop()
        super().stop()
        self.scheduler.leadership.release()

    def _run(self) -> None:
        config = self.scheduler.config
        next_recovery = 0.0
        # Redis's side is reported by the election, which talks to it on every tick.
        watch = self._health.watch(POSTGRESQL)
        while not self._stopping.is_set():
            report = TickReport(acted=False)
            tick_now = self._now()
            try:
                self.scheduler.leadership.tick()
                report = self.scheduler.tick(tick_now)
                if time.monotonic() >= next_recovery:
                    self.scheduler.recover(self._now())
                    self.scheduler.observe(self._now())
                    next_recovery = time.monotonic() + config.recover_interval
            except OUTAGE_ERRORS as error:
                # A store is down: said once by the tracker; back off, then go on.
                pause = watch.failed(error)
                if pause is not None:
                    self._stopping.wait(pause)
                    continue
                log.exception("scheduler.tick_failed", error=str(error))
            except Exception as error:  # the loop outlives any one failure
                log.exception("scheduler.tick_failed", error=str(error))
            else:
                if report.acted:  # a standby's tick reads no table
                    watch.succeeded()
            self._stopping.wait(self._pause(config.tick_interval, report, tick_now))

    def _pause(self, longest: float, report: TickReport, tick_now: datetime) -> float:
        """Sleep until the next fire is due, but never longer than a tick: the index may
        learn of new or changed jobs at any time. A standby waits a whole tick, and so
        does a leader whose tick did nothing although an entry was already due when it
        looked: an entry it cannot act on must not make it spin. (One that fell due
        after it looked is simply next.)"""
        due = self.scheduler.next_due
        if not report.acted or due is None:
            return longest
        # The index keeps milliseconds: an entry only counts as stuck once it was due a
        # whole millisecond before the tick looked.
        if due < tick_now - INDEX_RESOLUTION and report.jobs == 0:
            return longest
        wait = (due - self._now()).total_seconds()
        return min(max(wait, 0.0), longest)
