"""The history checker: reads the whole of a fault run and names each broken promise.

Its input is a ``History`` (the log, the effects ledger, what the API accepted, the
injected faults, what the projections showed). It checks, in the spirit of Jepsen's
checkers, the promises jobledger makes whatever breaks meanwhile:

- nothing lost: every accepted run is in the log and ended (Completed, DeadLettered,
  Cancelled or Discarded); every occurrence of a job was fired or recorded as missed;
- no (job, occurrence) fired twice; at most one accepted outcome per execution, each on
  the live lease (never on one that had expired or been replaced);
- attempts within max_retries + 1 per budget (a requeue starts a new one);
- nothing early: no fire, lease, handler start or retry before it was due;
- overlap and misfire policies honoured; leader epochs in ``JobFired`` never fall;
- the queue equals a fold of the log, the read models equal a rebuild, and both dead
  letter views equal the log's dead letters;
- each idempotency key names one execution;
- every handler invocation ran on a lease the log recorded, every completion made its
  side effect; a side effect made more than once (at-least-once) is counted, with the
  fault that caused it, but is not a violation;
- no lease expired while its worker heartbeated: an expiry needs a fault on that
  worker's process (killed, stopped, its clock off) or on a shared store during the
  lease;
- no role exited by itself.
"""

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any
from uuid import UUID

from tests.chaos.folds import (
    COMPLETED,
    DEAD_LETTERED,
    DLQ,
    DOUBLE_FIRE,
    EARLY,
    EFFECT,
    EPOCH,
    FIRE_SLACK,
    IDEMPOTENCY,
    LIVE_LEASE,
    LOST,
    MISFIRE,
    OPEN,
    OVERLAP,
    PENDING,
    QUARANTINE,
    QUEUE,
    READ_MODELS,
    ROLE_EXIT,
    RUNNING,
    Job,
    Lease,
    Run,
    Say,
    Violation,
    fold_streams,
)
from tests.chaos.history import Effect, Event, Fault, History

from jobledger.domain.definitions import JobDefinition
from jobledger.domain.execution import TERMINAL, ExecutionStatus
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy

# Handlers that write the effects ledger: their completions must show a side effect.
LEDGER_HANDLERS = frozenset({"chaos.effect", "chaos.failing"})
PLAN_SPREAD = timedelta(seconds=1)  # the events of one tick's plan for a job are this close
# How long a run leased before a cancel_other fire may be unknown to the scheduler's
# view of open runs (a projection: it lags the log).
SEEN_AFTER = timedelta(seconds=5)
SHARED_STORES = frozenset({"redis", "postgresql"})
FAULT_SLACK = timedelta(seconds=1)  # how long before a lease a fault may still end it


@dataclass(frozen=True)
class Duplicate:
    """A side effect made more than once (at-least-once), and what caused it."""

    execution_id: UUID
    effects: int
    cause: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    invocations: int = 0
    attempts: int = 0

    def named(self, invariant: str) -> list[Violation]:
        return [v for v in self.violations if v.invariant == invariant]

    @property
    def lost(self) -> list[Violation]:
        return self.named(LOST)


def check(history: History) -> Verdict:
    verdict = Verdict()
    say = verdict.violations.append
    events = sorted(history.events, key=lambda e: e.position)
    skip = history.injected | {e.stream for e in events if e.type == "Undecodable"}
    runs, job_folds = fold_streams(events, say, history.settled_at, skip)
    jobs = {stream: fold.job for stream, fold in job_folds.items()}
    if history.settled_at is not None:
        ended_at = max([e.at for e in events] + [history.settled_at])
        for fold in job_folds.values():
            fold.check_not_overdue(ended_at, "at the end of the run")
    _check_ended(history, runs, jobs, say)
    _check_fires(events, runs, say)
    _check_policies(runs, jobs, history.grace, say)
    _check_epochs(events, say)
    _check_idempotency(history, runs, say)
    _check_views(history, runs, skip, say)
    _check_effects(history.effects, runs, say)
    _check_live_leases(runs, history.faults, say)
    for exit_ in history.exits:
        role, _, how = exit_.partition(": ")
        say(Violation(ROLE_EXIT, role, how))
    verdict.duplicates = duplicates(history.effects, runs, history.faults)
    verdict.statuses = Counter(run.status for run in runs.values())
    verdict.invocations = len(history.effects)
    verdict.attempts = sum(len(run.leases) for run in runs.values())
    return verdict


# ---- nothing lost ----------------------------------------------------------------------


def _check_ended(
    history: History, runs: Mapping[UUID, Run], jobs: Mapping[UUID, Job], say: Say
) -> None:
    """Every execution ended; every accepted run and job is in the log."""
    for run in runs.values():
        if run.status not in TERMINAL:
            say(Violation(LOST, f"execution {run.id}", f"still {run.status} after quiescence"))
    for accepted in history.accepted:
        if accepted.execution_id is not None and accepted.execution_id not in runs:
            subject = f"execution {accepted.execution_id}"
            say(Violation(LOST, subject, f"accepted ({accepted.kind}) but not in the log"))
        if accepted.kind == "job" and accepted.job_id not in jobs:
            say(Violation(LOST, f"job {accepted.job_id}", "created (201) but not in the log"))


def _check_fires(events: Sequence[Event], runs: Mapping[UUID, Run], say: Say) -> None:
    """Every fire enqueued its execution, and no occurrence has two executions."""
    for event in events:
        if event.type == "JobFired" and event.data["execution_id"] not in runs:
            subject = f"job {event.stream}"
            say(Violation(LOST, subject, f"fired at {event.position}, never enqueued"))
    by_occurrence: dict[tuple[UUID, datetime], list[UUID]] = {}
    for run in runs.values():
        if run.job_id is not None and run.scheduled_for is not None:
            by_occurrence.setdefault((run.job_id, run.scheduled_for), []).append(run.id)
    for (job_id, occurrence), ids in by_occurrence.items():
        if len(ids) > 1:
            detail = f"{occurrence.isoformat()} has executions {', '.join(map(str, ids))}"
            say(Violation(DOUBLE_FIRE, f"job {job_id}", detail))


# ---- overlap and misfire policies ----------------------------------------------------


def _check_policies(
    runs: Mapping[UUID, Run], jobs: Mapping[UUID, Job], grace: timedelta, say: Say
) -> None:
    of_job: dict[UUID, list[Run]] = {}
    for run in runs.values():
        if run.job_id is not None:
            of_job.setdefault(run.job_id, []).append(run)
    for job in jobs.values():
        for event, definition in job.decisions:
            if event.type == "JobFired":
                _check_overlap(job, event, definition, of_job.get(job.id, []), say)
        for plan in _plans(job.decisions):
            _check_plan(job, plan, grace, say)


def _check_overlap(
    job: Job, fire: Event, definition: JobDefinition, runs: Sequence[Run], say: Say
) -> None:
    policy = definition.overlap
    if policy is OverlapPolicy.BUFFER_ALL:
        _check_turns(job, fire, runs, say)
        return
    if policy is OverlapPolicy.CANCEL_OTHER:
        _check_cancelled(job, fire, runs, say)
        return
    if policy is OverlapPolicy.ALLOW:
        return
    fired = fire.data["execution_id"]
    others = [(run.id, run.status_at(fire.position)) for run in runs if run.id != fired]
    wanted = OPEN if policy is OverlapPolicy.SKIP_IF_RUNNING else frozenset({PENDING})
    open_runs = [f"{run_id} ({status})" for run_id, status in others if status in wanted]
    if open_runs:
        occurrence = fire.data["scheduled_for"].isoformat()
        detail = (
            f"{occurrence} fired at {fire.position} under {policy} while {', '.join(open_runs)}"
        )
        say(Violation(OVERLAP, f"job {job.id}", detail))


def _check_turns(job: Job, fire: Event, runs: Sequence[Run], say: Say) -> None:
    """buffer_all: every fire runs, but never while another run of the job is running
    (the runs take turns: the log shows each lease after the run before it settled)."""
    fired = fire.data["execution_id"]
    run = next((run for run in runs if run.id == fired), None)
    if run is None:
        return
    for position in _lease_positions(run):
        others = [o.id for o in runs if o.id != fired and o.status_at(position) == RUNNING]
        if others:
            detail = (
                f"{run.id} leased at {position} under buffer_all while"
                f" {', '.join(map(str, others))} (running)"
            )
            say(Violation(OVERLAP, f"job {job.id}", detail))


def _lease_positions(run: Run) -> Iterator[int]:
    """Where ``run`` started running (each lease, after a state that was not running)."""
    before: ExecutionStatus | None = None
    for position, status in run.changes:
        if status == RUNNING and before != RUNNING:
            yield position
        before = status


def _check_cancelled(job: Job, fire: Event, runs: Sequence[Run], say: Say) -> None:
    """cancel_other: a fire cancels, in its own save, the runs it finds running, so none
    of them completes after it. A run leased within ``SEEN_AFTER`` of the fire may not
    have reached the scheduler's view of open runs yet, and is not named."""
    fired = fire.data["execution_id"]
    for run in runs:
        if run.id == fired or run.status_at(fire.position) != RUNNING:
            continue
        leased = [lease.at for lease in run.leases if lease.at <= fire.at]
        seen = bool(leased) and leased[-1] <= fire.at - SEEN_AFTER
        completed = [p for p, status in run.changes if status == COMPLETED and p > fire.position]
        if seen and completed:
            detail = (
                f"{run.id} (running) completed at {completed[0]}, after the cancel_other"
                f" fire at {fire.position}"
            )
            say(Violation(OVERLAP, f"job {job.id}", detail))


def _plans(
    decisions: Sequence[tuple[Event, JobDefinition]],
) -> Iterator[list[tuple[Event, JobDefinition]]]:
    """The job's fire decisions grouped by the tick that made them: events of one save
    sit next to each other in the log, made within a moment."""
    plan: list[tuple[Event, JobDefinition]] = []
    for decision in decisions:
        if plan:
            last, first = plan[-1][0], plan[0][0]
            event = decision[0]
            together = event.position == last.position + 1 and event.at - first.at < PLAN_SPREAD
            if not together:
                yield plan
                plan = []
        plan.append(decision)
    if plan:
        yield plan


def _check_plan(
    job: Job, plan: Sequence[tuple[Event, JobDefinition]], grace: timedelta, say: Say
) -> None:
    decided, definition = plan[0][0].at, plan[-1][1]
    events = [event for event, _ in plan]

    def late(occurrence: datetime) -> bool:  # late beyond doubt when the plan was made
        return decided - occurrence > grace + FIRE_SLACK

    subject = f"job {job.id}"
    for event in events:
        if event.type != "JobFiresMissed":
            continue
        last, reason = event.data["last"], str(event.data["reason"])
        if reason == "downtime" and decided - last <= grace:
            lateness = (decided - last).total_seconds()
            say(
                Violation(
                    MISFIRE,
                    subject,
                    f"{last.isoformat()} recorded missed {lateness:.1f} s late, within the grace",
                )
            )
        if reason == "overlap" and definition.overlap is OverlapPolicy.ALLOW:
            say(Violation(MISFIRE, subject, f"overlap miss at {event.position} under allow"))
    fires = [e for e in events if e.type == "JobFired"]
    late_fires = sum(1 for e in fires if late(e.data["scheduled_for"]))
    # Occurrences the misfire policy let through: fired, or then skipped by the overlap.
    passed = len(fires) + sum(int(e.data["count"]) for e in _missed(events, "overlap"))
    missed = bool(_missed(events, "downtime"))
    problem = _misfire_problem(definition, late_fires, passed, missed=missed)
    if problem:
        say(Violation(MISFIRE, subject, f"plan at {events[0].position}: {problem}"))


def _missed(events: Sequence[Event], reason: str) -> list[Event]:
    return [e for e in events if e.type == "JobFiresMissed" and str(e.data["reason"]) == reason]


def _misfire_problem(
    definition: JobDefinition, late_fires: int, passed: int, *, missed: bool
) -> str | None:
    """What is wrong with a plan that fired ``late_fires`` occurrences late beyond
    doubt, let ``passed`` through in all, and recorded late ones missed (``missed``)."""
    policy, cap = definition.misfire, definition.catch_up_cap
    if policy is MisfirePolicy.SKIP and late_fires:
        return f"{late_fires} occurrence(s) fired later than the grace under skip"
    if policy is MisfirePolicy.FIRE_ONCE and late_fires > 1:
        return f"{late_fires} late occurrences fired under fire_once"
    if policy is MisfirePolicy.FIRE_ONCE and missed and not passed:
        return "every late occurrence recorded missed under fire_once"
    if policy is MisfirePolicy.FIRE_ALL and late_fires > cap:
        return f"{late_fires} late occurrences fired, above the cap {cap}"
    if policy is MisfirePolicy.FIRE_ALL and missed and passed < cap:
        return f"late occurrences recorded missed after {passed} fire(s), below the cap {cap}"
    return None


# ---- epochs ----------------------------------------------------------------------------


def _check_epochs(events: Sequence[Event], say: Say) -> None:
    highest, at = 0, 0
    for event in events:
        if event.type != "JobFired":
            continue
        epoch = int(event.data["leader_epoch"])
        if epoch < highest:
            detail = f"JobFired at {event.position} has epoch {epoch}, after {highest} at {at}"
            say(Violation(EPOCH, f"job {event.stream}", detail))
        elif epoch > highest:
            highest, at = epoch, event.position


# ---- idempotency -----------------------------------------------------------------------


def _check_idempotency(history: History, runs: Mapping[UUID, Run], say: Say) -> None:
    for key, answered in history.answers.items():
        if len(answered) > 1:
            names = ", ".join(sorted(str(i) for i in answered))
            say(
                Violation(
                    IDEMPOTENCY, f"key {key}", f"answered with {len(answered)} executions: {names}"
                )
            )
    by_key: dict[tuple[UUID | None, str], list[UUID]] = {}
    for run in runs.values():
        if run.trigger_key is not None:
            by_key.setdefault((run.job_id, run.trigger_key), []).append(run.id)
    for (_, key), ids in by_key.items():
        if len(ids) > 1:
            names = ", ".join(map(str, ids))
            say(Violation(IDEMPOTENCY, f"key {key}", f"{len(ids)} executions in the log: {names}"))


# ---- the projections -------------------------------------------------------------------


def _check_views(
    history: History, runs: Mapping[UUID, Run], skip: frozenset[UUID], say: Say
) -> None:
    views = history.views
    for line in views.queue_differences:
        say(Violation(QUEUE, "queue verify", line))
    for table in sorted(set(views.read_models) | set(views.rebuilt)):
        live, rebuilt = views.read_models.get(table, ()), views.rebuilt.get(table, ())
        if list(live) != list(rebuilt):
            say(Violation(READ_MODELS, table, _first_difference(live, rebuilt)))
    dead = {run.id for run in runs.values() if run.status == DEAD_LETTERED}
    for name, shown in (("the read models", views.dlq_read_model), ("the queue", views.dlq_queue)):
        for missing in sorted(dead - shown, key=str):
            say(Violation(DLQ, f"execution {missing}", f"dead-lettered in the log, not in {name}"))
        for extra in sorted(shown - dead, key=str):
            say(
                Violation(
                    DLQ, f"execution {extra}", f"in the dead letters of {name}, not dead in the log"
                )
            )
    for stream in sorted(views.quarantined - skip, key=str):
        say(
            Violation(
                QUARANTINE, f"stream {stream}", "quarantined, though not written as unprojectable"
            )
        )


def _first_difference(live: Sequence[tuple[Any, ...]], rebuilt: Sequence[tuple[Any, ...]]) -> str:
    for index, (a, b) in enumerate(zip(live, rebuilt, strict=False)):
        if a != b:
            return f"row {index}: projected {a!r}, rebuilt {b!r}"
    return f"{len(live)} rows projected, {len(rebuilt)} rebuilt"


# ---- side effects ----------------------------------------------------------------------


def _leases(runs: Mapping[UUID, Run]) -> dict[tuple[UUID, int, str], Lease]:
    return {
        (run.id, lease.attempt, lease.worker): lease
        for run in runs.values()
        for lease in run.leases
    }


def _check_effects(effects: Sequence[Effect], runs: Mapping[UUID, Run], say: Say) -> None:
    leases = _leases(runs)
    made: set[tuple[UUID, int, str]] = set()
    for effect in effects:
        key = (effect.execution_id, effect.attempt, effect.worker)
        subject = f"execution {effect.execution_id}"
        lease = leases.get(key)
        if lease is None:
            say(
                Violation(
                    EFFECT,
                    subject,
                    f"attempt {effect.attempt} ran on {effect.worker} without a lease in the log",
                )
            )
        elif effect.start < lease.ready_at:
            early = (lease.ready_at - effect.start).total_seconds()
            say(Violation(EARLY, subject, f"handler started {early:.3f} s before it was ready"))
        if effect.durable:
            made.add(key)
    for run in runs.values():
        if run.completed_by is None or run.spec is None or run.spec.handler not in LEDGER_HANDLERS:
            continue
        lease = next((le for le in run.leases if le.lease_id == run.completed_by), None)
        if lease is not None and (run.id, lease.attempt, lease.worker) not in made:
            say(
                Violation(
                    EFFECT, f"execution {run.id}", "completed, but its attempt made no side effect"
                )
            )


def _check_live_leases(runs: Mapping[UUID, Run], faults: Sequence[Fault], say: Say) -> None:
    """Every lease that expired had a fault to explain it: on its worker's process, or
    on a shared store, between the lease and its expiry. A live worker's heartbeats
    keep its lease, however long the run and whatever it reports meanwhile."""
    for run in runs.values():
        for lease, expired_at in run.expiries:
            pid = _pid(lease.worker)
            during = [
                f for f in faults if f.start <= expired_at and f.end >= lease.at - FAULT_SLACK
            ]
            if any(f.pid is not None and f.pid == pid for f in during):
                continue
            if any(f.target in SHARED_STORES for f in during):
                continue
            held = (expired_at - lease.at).total_seconds()
            say(
                Violation(
                    LIVE_LEASE,
                    f"execution {run.id}",
                    f"attempt {lease.attempt} on {lease.worker} expired after {held:.1f} s"
                    " with no fault on its worker or a shared store",
                )
            )


def duplicates(
    effects: Sequence[Effect], runs: Mapping[UUID, Run], faults: Sequence[Fault]
) -> list[Duplicate]:
    """Executions whose side effect was made more than once, each with its cause."""
    made: dict[UUID, list[Effect]] = {}
    for effect in effects:
        if effect.durable:
            made.setdefault(effect.execution_id, []).append(effect)
    found = []
    for execution_id, copies in made.items():
        if len(copies) < 2:
            continue
        copies.sort(key=lambda e: e.start)
        run = runs.get(execution_id)
        causes = [_cause(first, later, run, faults) for first, later in pairwise(copies)]
        found.append(Duplicate(execution_id, len(copies), "; ".join(causes)))
    return found


def _cause(first: Effect, later: Effect, run: Run | None, faults: Sequence[Fault]) -> str:
    """The fault that made ``later`` repeat ``first``: one on the first's worker while it
    ran or before its report was saved, else one of a shared store; else how the log
    saw the first attempt end."""
    pid = _pid(first.worker)
    around = [
        f for f in faults if f.start <= later.start and f.end >= first.start - timedelta(seconds=1)
    ]
    own = [f for f in around if f.pid is not None and f.pid == pid]
    shared = [f for f in around if f.target in SHARED_STORES]
    for fault in own or shared:
        return f"{fault.kind} ({fault.target})"
    settled = "unknown"
    if run is not None:
        lease = next(
            (le for le in run.leases if (le.attempt, le.worker) == (first.attempt, first.worker)),
            None,
        )
        if lease is not None:
            settled = run.settlements.get(lease.lease_id, "never settled").split(" at ")[0]
    return f"no injected fault (first attempt: {settled})"


def _pid(worker: str) -> int | None:
    tail = worker.rpartition("-")[2]
    return int(tail) if tail.isdigit() else None
