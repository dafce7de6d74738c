"""Releases: what follows a run's end, decided by the scheduler leader from the log.

A follower reads the events that end a run (completed, dead-lettered, cancelled,
skipped) and the occurrences a job missed, after its position, and carries out what
each one releases:

- the downstream jobs of a job's occurrence: fired, or skipped, once every upstream
  run of the occurrence ended (``domain/dependencies.py``), and a job's missed
  occurrences mirrored onto its downstreams;
- the next steps of a workflow (``domain/workflow.py``);
- the next occurrence of a buffered backfill;
- ``pause_on_failure``: a dead letter pauses its job.

It runs in the scheduler process and acts only while that scheduler leads. Its
position is a row in ``jobledger_positions``, moved after the page's effects are
saved; a process that dies in between reads the page again. That is safe because every
effect is idempotent by construction: a released run's id is derived from its job and
occurrence (or its workflow and step), so a second release collides in the store; a
workflow ignores the outcome of a step it already recorded; a backfill releases only
after the run it waits for; a mirrored miss and a pause check the job's state. Two
leaders at once (split brain) are safe for the same reasons (ADR: releases).
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import structlog
from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.dependencies import DependencyGraph, Verdict, upstream_results, verdict
from jobledger.domain.errors import ConflictError, NotFoundError
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger, occurrence_execution_id
from jobledger.domain.job import Job, MissReason
from jobledger.domain.schedules import MissedFires
from jobledger.domain.workflow import Workflow, step_status_of
from jobledger.infra.leadership import Leadership
from jobledger.persistence.codec import EventView
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow
from jobledger.projections.database import Database
from jobledger.projections.errors import ContendedError
from jobledger.projections.log.positions import Positions
from jobledger.projections.log.reader import (
    LOG_CHANNEL,
    Follower,
    Listen,
    Listener,
    LogReader,
    StepHealth,
    Wakeup,
)
from jobledger.projections.log.streams import load_many
from jobledger.projections.quarantine import RELEASES_FOLLOWER, Isolation

log = structlog.get_logger(__name__)

POSITION = "releases"
# The status each ending event leaves its run in (see ``_ending`` for a discard).
_ENDINGS: dict[type[Any], ExecutionStatus] = {
    Execution.Completed: ExecutionStatus.COMPLETED,
    Execution.DeadLettered: ExecutionStatus.DEAD_LETTERED,
    Execution.Cancelled: ExecutionStatus.CANCELLED,
    Execution.Skipped: ExecutionStatus.SKIPPED,
    Execution.Expired: ExecutionStatus.DISCARDED,
    Execution.Discarded: ExecutionStatus.DISCARDED,
}
# A run's first event too, read through a view of two fields (its state, with the
# payload, is skipped): a run of no job and no workflow releases nothing when it ends,
# and knowing that from its first event spares loading it then (``_Unowned``).
_ENQUEUED_VIEW = EventView(Execution.Enqueued, ("job_id", "workflow_id"))
_ENQUEUED = _ENQUEUED_VIEW.struct
TOPICS = tuple(
    sorted(
        {*(get_topic(kind) for kind in _ENDINGS), Job.FiresMissed.TOPIC, Execution.Enqueued.TOPIC}
    )
)
# The most runs known to release nothing that a releaser keeps in mind at once.
MAX_UNOWNED = 1_000_000


def _ending(event: Any) -> ExecutionStatus | None:  # noqa: ANN401 (any event of the page)
    """The status an ending event leaves its run in; None for any other event, and for
    the discard of a dead letter, which follows an end already released (a handler's
    own discard is its run's end)."""
    if isinstance(event, Execution.Discarded) and event.lease_id is None:
        return None
    return _ENDINGS.get(type(event))


# A page applied again after a conflict: another writer changed an aggregate first.
_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Ended:
    """A run's end, as the releases see it: the run, and the status the event gave it
    (the run may have moved on since, e.g. been requeued)."""

    run: Execution
    status: ExecutionStatus
    at: datetime


@dataclass
class ReleaseStats:
    pages: int = 0
    fired: int = 0
    skipped: int = 0
    steps: int = 0
    paused: int = 0
    conflicts: int = 0


@dataclass
class _Batch:
    """The aggregates one page changes, loaded once each, and the runs they release."""

    ledger: Ledger
    now: datetime
    stats: ReleaseStats
    epoch: int = 0  # the leader epoch the releases are made under
    aggregates: dict[UUID, Aggregate] = field(default_factory=dict)
    released: dict[UUID, list[Execution]] = field(default_factory=dict)
    runs: dict[UUID, Execution | None] = field(default_factory=dict)
    _graph: list[DependencyGraph | None] = field(default_factory=list)

    @property
    def graph(self) -> DependencyGraph | None:
        """The dependency graph, read once, when a run of a job first needs it (a page
        of workflow steps needs none)."""
        if not self._graph:
            self._graph.append(self.ledger.dependency_graph())
        return self._graph[0]

    def prefetch_workflows(self, ids: Iterable[UUID]) -> None:
        """Load the workflows among ``ids`` not known yet, in one query."""
        wanted = [i for i in set(ids) if i not in self.aggregates]
        self.aggregates.update(load_many(self.ledger, Workflow, wanted))

    def job(self, job_id: UUID) -> Job | None:
        found = self._load(job_id, self.ledger.get_job)
        return found if isinstance(found, Job) else None

    def workflow(self, workflow_id: UUID) -> Workflow | None:
        found = self._load(workflow_id, self.ledger.get_workflow)
        return found if isinstance(found, Workflow) else None

    def _load(self, aggregate_id: UUID, get: Callable[[UUID], Aggregate]) -> Aggregate | None:
        if aggregate_id not in self.aggregates:
            try:
                self.aggregates[aggregate_id] = get(aggregate_id)
            except NotFoundError:
                return None
        return self.aggregates[aggregate_id]

    def prefetch(self, ids: Iterable[UUID]) -> None:
        """Load the runs among ``ids`` not known yet, in one query."""
        wanted = [i for i in set(ids) if i not in self.runs]
        found = load_many(self.ledger, Execution, wanted)
        for run_id in wanted:
            self.runs[run_id] = found.get(run_id)

    def run(self, run_id: UUID) -> Execution | None:
        if run_id not in self.runs:
            self.prefetch([run_id])
        return self.runs[run_id]

    def add(self, owner: Aggregate, execution: Execution | None = None) -> None:
        self.aggregates[owner.id] = owner
        runs = self.released.setdefault(owner.id, [])
        if execution is not None:
            runs.append(execution)
            self.runs[execution.id] = execution

    def changed(self) -> list[Aggregate]:
        """Each changed aggregate with the runs it released (none the page looked at
        but left as it was), in the order to save them."""
        return [
            aggregate
            for owner, runs in self.released.items()
            if runs or self.aggregates[owner].pending_events
            for aggregate in (self.aggregates[owner], *runs)
        ]


class Releaser:
    """Carries out releases page by page (see the module docstring)."""

    def __init__(
        self,
        ledger: Ledger,
        database: Database,
        leadership: Leadership,
        *,
        positions: Positions,
        page_size: int = 500,
        now: Clock = utc_now,
        isolation: Isolation | None = None,
        position: str = POSITION,
    ) -> None:
        self.ledger = ledger
        self.leadership = leadership
        self.stats = ReleaseStats()
        self._isolation = isolation or Isolation(RELEASES_FOLLOWER, hold=False)
        self._reader = LogReader(ledger, page_size, topics=TOPICS, views=(_ENQUEUED_VIEW,))
        self._unowned = _Unowned()
        self._database = database
        self._position = positions.of(position)
        self._cursor: int | None = None
        self._now = now

    def position(self) -> int:
        return self._position.get()

    def step(self) -> bool:
        """Carry out the next page's releases; True if there was one."""
        if not self.leadership.is_leader():
            self._cursor = None  # another leader may move the position meanwhile
            return False
        start = self._position.get() if self._cursor is None else self._cursor
        page = self._reader.rows(start)
        if page.position == start:
            return False
        # An event whose releases fail (a run that no longer loads, say) is recorded in
        # the quarantine and passed over: one event never stops every job's releases.
        self._isolation.apply(page, start, self._apply_rows)
        # While it leads, nobody else should move the position: it is read once. (A
        # second leader's moves only make the two read pages again, which is safe.)
        self._cursor = page.position
        self.stats.pages += 1
        return True

    def _apply_rows(self, rows: Sequence[LogRow], _start: int, position: int) -> bool:
        events = self._unowned.sift(self._reader.event(row) for row in rows)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                self._carry_out(events)
                break
            except ConflictError as error:
                # Fresh copies, and the page again: every effect is idempotent.
                self.stats.conflicts += 1
                if attempt == _CONFLICT_RETRIES - 1:
                    raise ContendedError(str(error)) from error  # later, not quarantined
        with self._database.transaction() as cursor:
            self._position.write(cursor, position)
        return True

    def apply_one(self, row: LogRow) -> None:
        """Carry out one event's releases again (a retry of a quarantined one)."""
        self._carry_out(self._unowned.sift([self._reader.event(row)]))

    def _carry_out(self, events: Sequence[Any]) -> None:
        batch = _Batch(self.ledger, self._now(), self.stats, self.leadership.epoch)
        ended = self._ended(batch, events)
        batch.prefetch_workflows(e.run.workflow_id for e in ended.values() if e.run.workflow_id)
        _prefetch_occurrences(batch, ended)
        for item in events:
            if isinstance(item, Job.FiresMissed):
                _mirror(batch, item)
            else:
                found = ended.get((item.originator_id, item.originator_version))
                if found is not None:
                    _follow(batch, found)
        changed = batch.changed()
        if changed:
            # One transaction for the page: a conflict anywhere means fresh copies and
            # the page again (every effect is idempotent), so nothing is half-applied.
            self.ledger.save_all(*changed)

    @staticmethod
    def _ended(batch: _Batch, events: Sequence[Any]) -> dict[tuple[UUID, int], Ended]:
        endings = [e for e in events if _ending(e) is not None]
        batch.prefetch(e.originator_id for e in endings)
        found: dict[tuple[UUID, int], Ended] = {}
        for ending in endings:
            run = batch.runs.get(ending.originator_id)
            if run is not None:
                key = (ending.originator_id, ending.originator_version)
                status = _ending(ending)
                if status is not None:
                    found[key] = Ended(run, status, ending.timestamp)
        return found


class _Unowned:
    """The runs of no job and no workflow whose first event this releaser read, until
    they end: their ends release nothing, so they are not loaded. A run whose first
    event came before this releaser's first page (a restart, a new leader) is loaded as
    before, and so is every run once more than ``MAX_UNOWNED`` are kept."""

    def __init__(self) -> None:
        self._runs: set[UUID] = set()

    def sift(self, events: Iterable[Any]) -> list[Any]:
        """The events that may release something: without the first events (noted
        here) and without the ends of runs known to release nothing."""
        kept: list[Any] = []
        runs = self._runs
        for event in events:
            if isinstance(event, _ENQUEUED):
                first: Any = event  # the view's struct: its fields are the event's
                if first.job_id is None and first.workflow_id is None:
                    if len(runs) >= MAX_UNOWNED:
                        runs.clear()  # only a cost: those runs are loaded at their end
                    runs.add(first.originator_id)
            elif _ending(event) is not None and event.originator_id in runs:
                runs.discard(event.originator_id)
            else:
                kept.append(event)
        return kept


def _prefetch_occurrences(batch: _Batch, ended: dict[tuple[UUID, int], Ended]) -> None:
    """One query for every run the page's dependency decisions will look at."""
    occurrences = [
        (e.run.job_id, e.run.scheduled_for)
        for e in ended.values()
        if e.run.job_id is not None and e.run.scheduled_for is not None
    ]
    graph = batch.graph if occurrences else None
    if graph is None:
        return
    wanted: list[UUID] = []
    for job_id, occurrence in occurrences:
        for downstream in graph.downstreams(job_id):
            wanted.append(occurrence_execution_id(downstream, occurrence))
            wanted += (
                occurrence_execution_id(up, occurrence)
                for up in graph.upstreams.get(downstream, ())
            )
    batch.prefetch(wanted)


def _follow(batch: _Batch, ended: Ended) -> None:
    run = ended.run
    if run.workflow_id is not None and run.step is not None:
        _settle_step(batch, ended)
        return
    if run.job_id is None:
        return
    if ended.status is ExecutionStatus.DEAD_LETTERED:
        _pause_for_failure(batch, run.job_id, run.id, ended.at)
    if run.scheduled_for is None:
        return  # a manual run: it stands for no occurrence
    if run.trigger is Trigger.BACKFILL:
        _release_backfill(batch, run.job_id, run.scheduled_for)
    _release_downstreams(batch, ended)


def _settle_step(batch: _Batch, ended: Ended) -> None:
    run = ended.run
    status = step_status_of(ended.status.value)
    workflow = batch.workflow(run.workflow_id) if run.workflow_id else None
    if workflow is None or status is None or run.step is None:
        return
    result = run.result if ended.status is ExecutionStatus.COMPLETED else None
    released = workflow.settle(
        run.step, status=status, result=result, error=run.last_error, at=batch.now
    )
    batch.add(workflow)
    for execution in released:
        batch.add(workflow, execution)
    batch.stats.steps += len(released)


def _pause_for_failure(batch: _Batch, job_id: UUID, run_id: UUID, dead_at: datetime) -> None:
    job = batch.job(job_id)
    if job is not None and job.pause_for_failure(execution_id=run_id, dead_at=dead_at):
        batch.add(job)
        batch.stats.paused += 1
        log.warning("releases.job_paused", job_id=str(job_id), execution_id=str(run_id))


def _release_backfill(batch: _Batch, job_id: UUID, finished: datetime) -> None:
    job = batch.job(job_id)
    if job is None or job.backfill_running != finished:
        return
    ids = {occurrence_execution_id(job_id, o): o for o in job.backfill_queue}
    batch.prefetch(ids)
    fired = {o for run_id, o in ids.items() if batch.runs.get(run_id) is not None}
    execution = job.release_backfill(
        finished=finished, fired=fired, at=batch.now, leader_epoch=batch.epoch
    )
    if execution is not None:
        batch.add(job, execution)
        batch.stats.fired += 1


def _release_downstreams(batch: _Batch, ended: Ended) -> None:
    run = ended.run
    if batch.graph is None or run.job_id is None or run.scheduled_for is None:
        return
    for downstream in sorted(batch.graph.downstreams(run.job_id)):
        job = batch.job(downstream)
        if job is not None:
            _decide(batch, job, run.scheduled_for, ended)


def _decide(batch: _Batch, job: Job, occurrence: datetime, ended: Ended) -> None:
    """Fire or skip ``job``'s ``occurrence`` if its upstream runs allow a verdict."""
    dependencies = job.definition.depends_on
    if batch.run(occurrence_execution_id(job.id, occurrence)) is not None:
        return  # decided already: fired, or skipped
    runs = {d.job: batch.run(occurrence_execution_id(d.job, occurrence)) for d in dependencies}
    statuses: dict[UUID, str | None] = {
        up: None if found is None else found.status.value for up, found in runs.items()
    }
    if ended.run.job_id in statuses:
        statuses[ended.run.job_id] = ended.status.value  # as this event left it
    decided = verdict(dependencies, statuses)
    if decided is Verdict.FIRE:
        results = {up: found.result if found else None for up, found in runs.items()}
        execution = job.fire_dependency(
            scheduled_for=occurrence,
            at=batch.now,
            upstream_results=upstream_results(results),
            leader_epoch=batch.epoch,
        )
        batch.stats.fired += execution is not None
    elif decided is Verdict.SKIP:
        failed = {
            found.id: str(statuses[up])
            for up, found in runs.items()
            if found is not None and statuses[up] != ExecutionStatus.COMPLETED.value
        }
        execution = job.skip_dependency(scheduled_for=occurrence, at=batch.now, failed=failed)
        batch.stats.skipped += execution is not None
    else:
        return
    if execution is not None:
        batch.add(job, execution)


def _mirror(batch: _Batch, missed: Job.FiresMissed) -> None:
    """A job's occurrences that never ran: its downstreams will not run them either. A
    miss because of an upstream failure has a skipped run, which releases on its own."""
    if batch.graph is None or missed.reason is MissReason.UPSTREAM_FAILED:
        return
    run = MissedFires(first=missed.first, last=missed.last, count=missed.count)
    for downstream in sorted(batch.graph.downstreams(missed.originator_id)):
        job = batch.job(downstream)
        if job is not None and job.mirror_upstream_misses(missed.originator_id, run):
            batch.add(job)


class ReleaseLoop:
    """The releases' follower in the scheduler process: polled every ``poll`` seconds
    (all stores), and woken by the log's channel (``listen``, where the store has one)
    once it leads: a standby holds no listening connection for it."""

    name = "releases"

    def __init__(
        self,
        releaser: Releaser,
        *,
        poll: float,
        listen: Listen | None = None,
        health: StepHealth | None = None,
        also_wake: Sequence[Wakeup] = (),
    ) -> None:
        self.releaser = releaser
        self._wakeup = Wakeup()
        # Others woken by the same listener (the scheduler's index): one connection.
        self._also_wake = also_wake
        self._follower = Follower(
            "releases", self._step, self._wakeup, poll_interval=poll, health=health
        )
        self._listen = listen
        self._health = health
        self._listener: Listener | None = None

    def _step(self) -> bool:
        listen = self._listen
        if self._listener is None and listen and self.releaser.leadership.is_leader():
            self._listener = listen(
                LOG_CHANNEL, [self._wakeup, *self._also_wake], health=self._health
            )
            self._listener.start()
        return self.releaser.step()

    @property
    def listening(self) -> bool:
        """Whether a listener wakes this loop (and ``also_wake``) as the log moves: it
        connected once (after a lost connection it wakes them all as it connects again)."""
        return self._listener is not None and self._listener.connections > 0

    def start(self) -> None:
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()
        if self._listener is not None:
            self._listener.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self._follower.wait(timeout)


class RetryLeadership:
    """The leadership a retry of quarantined releases acts under, outside the scheduler:
    the latest epoch in the store, so a fire it makes never lowers the epochs in the
    log. (Two leaders at once are safe for releases: see the module docstring.)"""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.changes = 0

    def tick(self) -> None:
        """Nothing to renew: it leads for one retry."""

    def is_leader(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing to release."""
