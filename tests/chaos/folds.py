"""Replays of the log, one stream at a time, that name what a stream must never show.

An execution is replayed as the aggregate would, but without refusing anything: a
history written by hand (or by a bug) may hold what the aggregate forbids, and the
replay says so instead of stopping. A job is replayed for its fires and misses.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from uuid import UUID

from tests.chaos.history import Event

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import TERMINAL, ExecutionStatus

LOST = "lost"
DOUBLE_FIRE = "double fire"
TWO_OUTCOMES = "two outcomes"
STALE_OUTCOME = "stale outcome"
SECOND_LEASE = "second lease"
OVER_BUDGET = "over budget"
EARLY = "early"
OVERLAP = "overlap"
MISFIRE = "misfire"
EPOCH = "epoch"
QUEUE = "queue"
READ_MODELS = "read models"
DLQ = "dlq"
IDEMPOTENCY = "idempotency"
EFFECT = "effect"
QUARANTINE = "quarantine"
ROLE_EXIT = "role exited"
LIVE_LEASE = "live lease expired"

PENDING, RUNNING = ExecutionStatus.PENDING, ExecutionStatus.RUNNING
COMPLETED, DEAD_LETTERED = ExecutionStatus.COMPLETED, ExecutionStatus.DEAD_LETTERED
CANCELLED, DISCARDED = ExecutionStatus.CANCELLED, ExecutionStatus.DISCARDED
OPEN = frozenset({PENDING, RUNNING})

# A failure's time is taken a moment before its event is made; for a lease expiry, at
# the start of the leader's recovery round, which may handle many leases.
RETRY_SLACK = timedelta(seconds=1)
# An occurrence is judged at a tick's start; its events are made a moment later.
FIRE_SLACK = timedelta(seconds=2)
# Once the run settled (no fault, a leader), how long a due occurrence may wait for
# its fire before it counts as lost.
DUE_SLACK = timedelta(seconds=6)
LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Violation:
    """A promise the history breaks: which one, about what, and how."""

    invariant: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Lease:
    lease_id: UUID
    attempt: int
    worker: str
    at: datetime
    ready_at: datetime  # when the execution became due, as the log said at the lease


@dataclass
class Run:
    """An execution as its events leave it."""

    id: UUID
    job_id: UUID | None = None
    trigger_key: str | None = None
    scheduled_for: datetime | None = None
    spec: ExecutionSpec | None = None
    status: ExecutionStatus = PENDING
    changes: list[tuple[int, ExecutionStatus]] = field(default_factory=list)  # after each event
    leases: list[Lease] = field(default_factory=list)
    completed_by: UUID | None = None  # the lease of its completion
    settlements: dict[UUID, str] = field(default_factory=dict)  # lease id -> what settled it
    expiries: list[tuple[Lease, datetime]] = field(default_factory=list)  # and when

    def status_at(self, position: int) -> ExecutionStatus | None:
        """Its status just before ``position`` (None before it existed)."""
        before = [status for at, status in self.changes if at < position]
        return before[-1] if before else None


Say = Callable[[Violation], None]


class ExecutionFold:
    """Replays one execution's events, reporting what no execution may do."""

    def __init__(self, stream: UUID, report: Say) -> None:
        self.run = Run(stream)
        self._report = report
        self._current: Lease | None = None
        self._expiring: UUID | None = None  # a lease whose expiry is being settled
        self._expired: set[UUID] = set()
        self._attempts_used = 0
        self._budget_start = 0
        self._ready_at = LONG_AGO
        self._retry_due: datetime | None = None
        self._steps: dict[str, Callable[[Event], None]] = {
            "ExecutionEnqueued": self._enqueued,
            "ExecutionLeased": self._leased,
            "ExecutionCompleted": self._completed,
            "ExecutionRetried": self._retried,
            "ExecutionDeadLettered": self._dead_lettered,
            "ExecutionLeaseExpired": self._lease_expired,
            "ExecutionDeferred": self._deferred,
            "ExecutionRequeued": self._requeued,
            "ExecutionCancelled": self._cancelled,
            "ExecutionDiscarded": self._discarded,
            "ExecutionSnoozed": self._deferred,  # the attempt given back, as a deferral's
            "ExecutionExpired": self._not_started,
        }

    def _say(self, invariant: str, detail: str) -> None:
        self._report(Violation(invariant, f"execution {self.run.id}", detail))

    def apply(self, event: Event) -> None:
        step = self._steps.get(event.type)
        if step is None:
            return
        run = self.run
        reopens = run.status == DEAD_LETTERED and event.type in {
            "ExecutionRequeued",
            "ExecutionDiscarded",
        }
        if run.status in TERMINAL and not reopens and event.type != "ExecutionEnqueued":
            self._say(TWO_OUTCOMES, f"{event.type} at {event.position} after it ended {run.status}")
        step(event)
        run.changes.append((event.position, run.status))

    # ---- the steps ------------------------------------------------------------------

    def _enqueued(self, event: Event) -> None:
        run = self.run
        if run.spec is not None:
            self._say(DOUBLE_FIRE, f"enqueued a second time, at {event.position}")
            return
        data = event.data
        run.spec = data["spec"]
        run.job_id = data.get("job_id")
        run.trigger_key = data.get("trigger_key")
        run.scheduled_for = data.get("scheduled_for")
        self._ready_at = data["ready_at"]
        self._attempts_used = int(data.get("attempt", 1)) - 1

    def _leased(self, event: Event) -> None:
        run, data = self.run, event.data
        if run.status != PENDING:
            held = f" (lease {self._current.lease_id} still live)" if self._current else ""
            self._say(SECOND_LEASE, f"leased at {event.position} while {run.status}{held}")
        attempt = int(data["attempt"])
        allowed = self._max_attempts()
        if attempt - self._budget_start > allowed:
            self._say(
                OVER_BUDGET,
                f"attempt {attempt} at {event.position}: {attempt - self._budget_start} of a"
                f" budget of {allowed} (max_retries + 1)",
            )
        self._check_not_early(event)
        lease = Lease(data["lease_id"], attempt, data["worker_id"], event.at, self._ready_at)
        run.leases.append(lease)
        self._current = lease
        run.status = RUNNING

    def _check_not_early(self, event: Event) -> None:
        if event.at < self._ready_at:
            early = (self._ready_at - event.at).total_seconds()
            self._say(EARLY, f"leased at {event.position} {early:.3f} s before it was ready")
        if self._retry_due is not None and event.at < self._retry_due:
            early = (self._retry_due - event.at + RETRY_SLACK).total_seconds()
            self._say(EARLY, f"retried at {event.position} {early:.3f} s before its back-off ended")
        self._retry_due = None

    def _max_attempts(self) -> int:
        spec = self.run.spec
        return spec.retry.max_attempts if spec is not None else 1

    def _outcome(self, event: Event) -> Lease | None:
        """Check that ``event`` reports on the live lease; the lease it settles."""
        lease_id = event.data.get("lease_id")
        current, run = self._current, self.run
        if lease_id is None:
            return current
        where = f"{event.type} at {event.position} for lease {lease_id}"
        if lease_id in self._expired:
            self._say(STALE_OUTCOME, f"{where}, which had expired")
        elif current is not None and lease_id == current.lease_id:
            if self._expiring == lease_id and event.type == "ExecutionCompleted":
                self._say(STALE_OUTCOME, f"{where}, which was expiring")
            return current
        elif lease_id in run.settlements:
            first = run.settlements[lease_id]
            self._say(TWO_OUTCOMES, f"{where}, which {first} had settled already")
        elif any(lease.lease_id == lease_id for lease in run.leases):
            self._say(STALE_OUTCOME, f"{where}, which a later lease had replaced")
        else:
            self._say(STALE_OUTCOME, f"{where}, which was never recorded")
        return next((lease for lease in run.leases if lease.lease_id == lease_id), None)

    def _settle(self, event: Event, lease: Lease | None, status: ExecutionStatus) -> None:
        run = self.run
        if lease is not None:
            run.settlements.setdefault(lease.lease_id, f"{event.type} at {event.position}")
            if self._expiring == lease.lease_id:
                self._expired.add(lease.lease_id)
                self._expiring = None
            if self._current is not None and self._current.lease_id == lease.lease_id:
                self._current = None
        run.status = status

    def _completed(self, event: Event) -> None:
        lease = self._outcome(event)
        run = self.run
        if run.completed_by is not None:
            self._say(TWO_OUTCOMES, f"completed again at {event.position}")
        run.completed_by = event.data.get("lease_id")
        if lease is not None:
            self._attempts_used = lease.attempt
        self._settle(event, lease, COMPLETED)

    def _retried(self, event: Event) -> None:
        lease = self._outcome(event)
        attempt = lease.attempt if lease is not None else self._attempts_used + 1
        self._attempts_used = attempt
        self._ready_at = event.data["ready_at"]
        spec = self.run.spec
        if spec is not None and not spec.retry.jitter:
            backoff = spec.retry.backoff(max(attempt - self._budget_start, 1))
            self._retry_due = event.at + backoff - RETRY_SLACK
        self._settle(event, lease, PENDING)

    def _dead_lettered(self, event: Event) -> None:
        lease = self._outcome(event)
        self._attempts_used = int(event.data.get("attempts", self._attempts_used))
        self._settle(event, lease, DEAD_LETTERED)

    def _lease_expired(self, event: Event) -> None:
        lease = self._outcome(event)
        if lease is not None and self._current is lease:
            self._expiring = lease.lease_id
            self.run.expiries.append((lease, event.at))

    def _deferred(self, event: Event) -> None:
        lease = self._outcome(event)
        self._ready_at = event.data["ready_at"]
        self._settle(event, lease, PENDING)

    def _requeued(self, event: Event) -> None:
        if self.run.status != DEAD_LETTERED:
            self._say(TWO_OUTCOMES, f"requeued at {event.position} while {self.run.status}")
        self._budget_start = self._attempts_used
        self._ready_at = event.data["ready_at"]
        self._retry_due = None
        self.run.status = PENDING

    def _cancelled(self, _event: Event) -> None:
        self._current = None
        self.run.status = CANCELLED

    def _discarded(self, event: Event) -> None:
        if event.data.get("lease_id") is not None:  # its handler's: an outcome of a lease
            lease = self._outcome(event)
            if lease is not None:
                self._attempts_used = lease.attempt
            self._settle(event, lease, DISCARDED)
            return
        if self.run.status != DEAD_LETTERED:
            self._say(TWO_OUTCOMES, f"discarded at {event.position} while {self.run.status}")
        self.run.status = DISCARDED

    def _not_started(self, event: Event) -> None:
        if self.run.status != PENDING:
            self._say(TWO_OUTCOMES, f"expired at {event.position} while {self.run.status}")
        self.run.status = DISCARDED


# ---- jobs ----------------------------------------------------------------------------


@dataclass
class Job:
    """A job as its events leave it: its definitions over time and its fire decisions."""

    id: UUID
    definition: JobDefinition | None = None
    next_fire_at: datetime | None = None
    paused: bool = False
    decisions: list[tuple[Event, JobDefinition]] = field(default_factory=list)
    fired: dict[datetime, int] = field(default_factory=dict)  # occurrence -> position


class JobFold:
    """Replays one job's events: fires in order and never early, none twice, every
    occurrence fired or recorded missed, and none left overdue once the run settled."""

    def __init__(self, stream: UUID, report: Say, settled_at: datetime | None) -> None:
        self.job = Job(stream)
        self._report = report
        self._settled_at = settled_at

    def _say(self, invariant: str, detail: str) -> None:
        self._report(Violation(invariant, f"job {self.job.id}", detail))

    def apply(self, event: Event) -> None:
        job, data = self.job, event.data
        if event.type in {"JobScheduled", "JobUpdated"}:
            job.definition = data["definition"]
        if event.type in {"JobPaused", "JobDeleted"}:
            self.check_not_overdue(event.at, f"{event.type} at {event.position}")
            job.paused = True
        if event.type == "JobResumed":
            job.paused = False
        if event.type == "JobFired":
            self._fired(event)
        if event.type == "JobFiresMissed":
            self._check_next(event, data["first"])
        if "next_fire_at" in data:
            job.next_fire_at = data["next_fire_at"]
        elif event.type in {"JobPaused", "JobDeleted"}:
            job.next_fire_at = None

    def _fired(self, event: Event) -> None:
        job, occurrence = self.job, event.data["scheduled_for"]
        if occurrence in job.fired:
            first = job.fired[occurrence]
            self._say(
                DOUBLE_FIRE, f"{occurrence.isoformat()} fired at {first} and {event.position}"
            )
        job.fired.setdefault(occurrence, event.position)
        if event.at < occurrence:
            early = (occurrence - event.at).total_seconds()
            self._say(EARLY, f"{occurrence.isoformat()} fired {early:.3f} s before it was due")
        self._check_next(event, occurrence)

    def _check_next(self, event: Event, occurrence: datetime) -> None:
        job = self.job
        if job.definition is not None:
            job.decisions.append((event, job.definition))
        if job.paused:
            self._say(MISFIRE, f"{event.type} at {event.position} while the job was paused")
        elif job.next_fire_at is not None and occurrence > job.next_fire_at:
            skipped = job.next_fire_at.isoformat()
            self._say(LOST, f"occurrence {skipped} was neither fired nor recorded as missed")

    def check_not_overdue(self, at: datetime, moment: str) -> None:
        """Once the run settled, an active job's next occurrence is never overdue for
        long: it was fired, or recorded as missed, by then."""
        job, settled, due = self.job, self._settled_at, self.job.next_fire_at
        if settled is None or at < settled or job.paused or due is None:
            return
        if due <= at - DUE_SLACK:
            late = (at - due).total_seconds()
            self._say(
                LOST,
                f"occurrence {due.isoformat()} still unfired {late:.1f} s after it was due"
                f" ({moment})",
            )


def fold_streams(
    events: Sequence[Event],
    report: Say,
    settled_at: datetime | None,
    skip: frozenset[UUID],
) -> tuple[dict[UUID, Run], dict[UUID, JobFold]]:
    """Every execution and job of the log, replayed; streams in ``skip`` are left out."""
    runs: dict[UUID, ExecutionFold] = {}
    jobs: dict[UUID, JobFold] = {}
    for event in events:
        if event.stream in skip:
            continue
        if event.type.startswith("Execution"):
            runs.setdefault(event.stream, ExecutionFold(event.stream, report)).apply(event)
        elif event.type.startswith("Job"):
            jobs.setdefault(event.stream, JobFold(event.stream, report, settled_at)).apply(event)
    return {stream: fold.run for stream, fold in runs.items()}, jobs
