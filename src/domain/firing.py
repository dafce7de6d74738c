"""What a scheduler does with a due job at ``now``: pure rules, time as an argument.

Occurrences at or before ``now`` are due. One on an excluded date (or a calendar's
holiday) is recorded as missed with reason ``excluded``, and takes no further part.
Of the others, those later than the misfire grace are late
(the scheduler was down or behind): the job's misfire policy decides which of them
may still fire; the rest are recorded as missed. Every fire, a late one as much as an
on-time one, then goes through the overlap policy, which skips it while an earlier run
(open before, or fired earlier in the same plan) is still open. Every decision becomes
an event on the job, in the order of the occurrences, so the history says why a run did
not happen.

Two policies let every fire through and act on the runs instead: ``buffer_all`` makes
the job's runs take turns (see ``Job``: they share a concurrency limit of one), and
``cancel_other`` cancels the runs still open when a fire comes (``superseded``); of
several fires in one plan, only the last fires then, as each would cancel the one
before at once, and the others are recorded missed.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from jobledger.domain.execution import Execution
from jobledger.domain.job import Job, MissReason
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy, ScheduleRule
from jobledger.domain.schedules import MissedFires, fires_between, is_excluded, plan_catch_up

DEFAULT_GRACE = timedelta(seconds=60)
DEFAULT_SCAN_LIMIT = 1000


@dataclass(frozen=True)
class Fire:
    scheduled_for: datetime

    @property
    def first(self) -> datetime:
        return self.scheduled_for


@dataclass(frozen=True)
class Miss:
    missed: MissedFires
    reason: MissReason
    policy: MisfirePolicy | OverlapPolicy | ScheduleRule

    @property
    def first(self) -> datetime:
        return self.missed.first


@dataclass(frozen=True)
class OpenRuns:
    """The job's executions that are not finished yet (for the overlap policy)."""

    pending: int = 0
    running: int = 0
    # Their ids, where the policy acts on them (``cancel_other``).
    ids: tuple[UUID, ...] = ()


def due_occurrences(job: Job, now: datetime, *, limit: int = DEFAULT_SCAN_LIMIT) -> list[datetime]:
    """The job's occurrences from its next fire up to ``now``, at most ``limit``."""
    first = job.next_fire_at
    if first is None or first > now or job.paused or job.deleted:
        return []
    return [first, *fires_between(job.definition.schedule, first, now, limit=limit - 1)]


def plan_due(
    job: Job,
    now: datetime,
    *,
    open_runs: OpenRuns = OpenRuns(),
    grace: timedelta = DEFAULT_GRACE,
    limit: int = DEFAULT_SCAN_LIMIT,
) -> list[Fire | Miss]:
    """The steps, in occurrence order, that bring the job up to ``now``.

    The misfire policy picks which late occurrences may still fire; every fire, late or
    on time, then passes the same overlap decision, which counts the fires planned
    before it as open runs.
    """
    occurrences = due_occurrences(job, now, limit=limit)
    schedule = job.definition.schedule
    excluded = [_excluded(o) for o in occurrences if is_excluded(schedule, o)]
    runnable = [o for o in occurrences if not is_excluded(schedule, o)]
    late = [o for o in runnable if now - o > grace]
    candidates = [*_late_steps(job, late), *(Fire(o) for o in runnable[len(late) :])]
    gate = _OverlapGate(job.definition.overlap, open_runs.pending, open_runs.running)
    decided = [gate.decide(step) for step in candidates]
    if job.definition.overlap is OverlapPolicy.CANCEL_OTHER:
        decided = _last_fire_only(decided)
    # Back in occurrence order (each step is one occurrence until they merge).
    return _merge_misses(sorted([*decided, *excluded], key=lambda step: step.first))


def superseded(job: Job, steps: list[Fire | Miss], open_runs: OpenRuns) -> tuple[UUID, ...]:
    """The open runs a plan's fire cancels: under ``cancel_other``, all of them."""
    fires = any(isinstance(step, Fire) for step in steps)
    if job.definition.overlap is not OverlapPolicy.CANCEL_OTHER or not fires:
        return ()
    return open_runs.ids


def superseded_reason(scheduled_for: datetime) -> str:
    return f"overlap cancel_other: the fire of {scheduled_for.isoformat()} replaces this run"


def _last_fire_only(steps: list[Fire | Miss]) -> list[Fire | Miss]:
    fires = [step for step in steps if isinstance(step, Fire)]
    return [
        _overlapped(step.scheduled_for, OverlapPolicy.CANCEL_OTHER)
        if isinstance(step, Fire) and step is not fires[-1]
        else step
        for step in steps
    ]


def _overlapped(occurrence: datetime, policy: OverlapPolicy) -> Miss:
    missed = MissedFires(first=occurrence, last=occurrence, count=1)
    return Miss(missed, MissReason.OVERLAP, policy)


def _excluded(occurrence: datetime) -> Miss:
    missed = MissedFires(first=occurrence, last=occurrence, count=1)
    return Miss(missed, MissReason.EXCLUDED, ScheduleRule.EXCLUSIONS)


def carry_out(
    job: Job, steps: list[Fire | Miss], *, leader_epoch: int, at: datetime
) -> list[Execution]:
    """Record the steps on the job; the executions must be saved with it, atomically."""
    executions: list[Execution] = []
    for step in steps:
        if isinstance(step, Fire):
            executions.append(
                job.fire(scheduled_for=step.scheduled_for, leader_epoch=leader_epoch, at=at)
            )
        else:
            job.record_missed_fires(step.missed, policy=step.policy, reason=step.reason)
    return executions


def _late_steps(job: Job, late: list[datetime]) -> list[Fire | Miss]:
    if not late:
        return []
    policy = job.definition.misfire
    plan = plan_catch_up(late, policy=policy, cap=job.definition.catch_up_cap)
    firing = set(plan.fire)
    return [
        Fire(o)
        if o in firing
        else Miss(MissedFires(first=o, last=o, count=1), MissReason.DOWNTIME, policy)
        for o in late
    ]


class _OverlapGate:
    """The overlap policy over a plan: each admitted fire adds a pending run."""

    def __init__(self, policy: OverlapPolicy, pending: int, running: int) -> None:
        self.policy, self.pending, self.running = policy, pending, running

    def decide(self, step: Fire | Miss) -> Fire | Miss:
        if isinstance(step, Miss):
            return step
        if _overlap_allows(self.policy, self.pending, self.running):
            self.pending += 1
            return step
        return _overlapped(step.scheduled_for, self.policy)


def _overlap_allows(policy: OverlapPolicy, pending: int, running: int) -> bool:
    match policy:
        case OverlapPolicy.ALLOW | OverlapPolicy.BUFFER_ALL | OverlapPolicy.CANCEL_OTHER:
            return True
        case OverlapPolicy.SKIP_IF_RUNNING:
            return pending + running == 0
        case OverlapPolicy.QUEUE_ONE:
            return pending == 0


def _merge_misses(steps: list[Fire | Miss]) -> list[Fire | Miss]:
    """Neighbouring misses for the same reason become one event with a count."""
    merged: list[Fire | Miss] = []
    for step in steps:
        last = merged[-1] if merged else None
        if isinstance(step, Miss) and isinstance(last, Miss) and last.reason == step.reason:
            run = MissedFires(
                first=last.missed.first,
                last=step.missed.last,
                count=last.missed.count + step.missed.count,
            )
            merged[-1] = Miss(run, step.reason, step.policy)
        else:
            merged.append(step)
    return merged
