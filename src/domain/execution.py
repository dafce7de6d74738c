"""The Execution aggregate: one run of a job, every attempt in one stream."""

import enum
import typing
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import (
    InvalidDefinitionError,
    InvalidTransitionError,
    StaleLeaseError,
)
from jobledger.domain.ids import ADHOC_NAMESPACE, name_uuid, trigger_execution_id
from jobledger.domain.instants import check_instant
from jobledger.domain.json_values import (
    MAX_KEY_CHARS,
    check_actor,
    check_reason,
    check_text,
    storable_text,
)
from jobledger.domain.policies import MAX_SNOOZE, check_snooze
from jobledger.domain.progress import Progress
from jobledger.domain.run_logs import LogLine

__all__ = [
    "ADHOC_NAMESPACE",
    "LEASE_EXPIRED_ERROR",
    "MAX_SNOOZE",
    "PERMANENT_FAILURE",
    "TERMINAL",
    "Execution",
    "ExecutionStatus",
    "Trigger",
    "occurrence_execution_id",
    "step_execution_id",
    "trigger_execution_id",
]


class ExecutionStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    DISCARDED = "discarded"
    # Never ran: an upstream run it depended on ended another way than it waited for.
    SKIPPED = "skipped"


class Trigger(enum.StrEnum):
    """Why the execution exists."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    ADHOC = "adhoc"
    BACKFILL = "backfill"  # an occurrence in the past, fired on request
    DEPENDENCY = "dependency"  # released by its upstream jobs' runs
    WORKFLOW = "workflow"  # a step of an ad-hoc workflow


TERMINAL = frozenset(
    {
        ExecutionStatus.COMPLETED,
        ExecutionStatus.DEAD_LETTERED,
        ExecutionStatus.CANCELLED,
        ExecutionStatus.DISCARDED,
        ExecutionStatus.SKIPPED,
    }
)
LEASE_EXPIRED_ERROR = "lease expired before the worker reported an outcome"
# What a permanent failure's error starts with: the handler said no retry can help.
PERMANENT_FAILURE = "permanent failure: "
BY_HANDLER = "handler"  # who discarded a run its own handler discarded


def occurrence_execution_id(job_id: uuid.UUID, scheduled_for: datetime) -> uuid.UUID:
    """The id of the execution of one scheduled occurrence; the same for every scheduler."""
    if scheduled_for.tzinfo is None:
        msg = "scheduled_for must be zone-aware"
        raise ValueError(msg)
    return name_uuid(job_id, "at:" + scheduled_for.astimezone(UTC).isoformat())


def step_execution_id(workflow_id: uuid.UUID, step: str) -> uuid.UUID:
    """The id of a workflow step's run: a second release of the step collides."""
    return name_uuid(workflow_id, "step:" + step)


class Execution(Aggregate):
    """One run of a job. Attempts are leased, reported and retried in this stream."""

    TOPIC = "jobledger:Execution"

    class Created(Aggregate.Created):
        # Never emitted (executions begin with Enqueued); eventsourcing wants every
        # event class of an aggregate with a stable topic to have one.
        TOPIC = "jobledger:ExecutionCreated"

    class Enqueued(Aggregate.Created):
        TOPIC = "jobledger:ExecutionEnqueued"
        job_id: uuid.UUID | None
        spec: ExecutionSpec
        trigger: Trigger
        scheduled_for: datetime | None
        trigger_key: str | None
        ready_at: datetime
        attempt: int
        # What the run's handler sees of the runs it waited for (by step name, or by
        # upstream job id); a workflow step's workflow and name. None before these
        # existed, and for runs that waited for nothing.
        upstream_results: dict[str, Any] | None = None
        workflow_id: uuid.UUID | None = None
        step: str | None = None
        # Who asked for the run and how they came (``via``: "session", "token:<name>",
        # "cli", "outbox"); None for a run the schedule or the system made, and before
        # these existed.
        by: str | None = None
        via: str | None = None

    class Skipped(Aggregate.Created):
        """An occurrence that will never run, recorded as an execution of its own so
        that its id (the occurrence's) says it was decided: an upstream run it waited
        for ended another way (``reason``; ``upstreams``: those runs)."""

        TOPIC = "jobledger:ExecutionSkipped"
        job_id: uuid.UUID | None
        spec: ExecutionSpec
        trigger: Trigger
        scheduled_for: datetime | None
        trigger_key: str | None
        ready_at: datetime
        attempt: int
        reason: str
        upstreams: tuple[uuid.UUID, ...]

    class Leased(Aggregate.Event):
        TOPIC = "jobledger:ExecutionLeased"
        attempt: int
        worker_id: str
        lease_id: uuid.UUID
        lease_expires_at: datetime

    class Completed(Aggregate.Event):
        TOPIC = "jobledger:ExecutionCompleted"
        lease_id: uuid.UUID
        duration: timedelta
        result: dict[str, Any]

    class Retried(Aggregate.Event):
        TOPIC = "jobledger:ExecutionRetried"
        lease_id: uuid.UUID
        error: str
        next_attempt: int
        ready_at: datetime

    class DeadLettered(Aggregate.Event):
        TOPIC = "jobledger:ExecutionDeadLettered"
        lease_id: uuid.UUID | None
        error: str
        attempts: int
        # The handler failed for good, with attempts left (older events: False).
        permanent: bool = False

    class LeaseExpired(Aggregate.Event):
        TOPIC = "jobledger:ExecutionLeaseExpired"
        lease_id: uuid.UUID

    class Deferred(Aggregate.Event):
        TOPIC = "jobledger:ExecutionDeferred"
        lease_id: uuid.UUID
        reason: str
        ready_at: datetime

    class Snoozed(Aggregate.Event):
        """The handler asked to run again at ``ready_at``: not an attempt spent."""

        TOPIC = "jobledger:ExecutionSnoozed"
        lease_id: uuid.UUID
        reason: str
        ready_at: datetime

    class Expired(Aggregate.Event):
        """The run was not started by its ``expires_at``: it never runs."""

        TOPIC = "jobledger:ExecutionExpired"
        expires_at: datetime
        at: datetime

    class Requeued(Aggregate.Event):
        TOPIC = "jobledger:ExecutionRequeued"
        by: str
        reason: str
        ready_at: datetime
        via: str | None = None  # how ``by`` came (see ``Enqueued``); None before it existed

    class BroughtForward(Aggregate.Event):
        """Someone made a pending run that waited for a later time (a back-off, a
        snooze, a deferral, its ``run_at``) due at ``ready_at``: a retry now."""

        TOPIC = "jobledger:ExecutionBroughtForward"
        by: str
        reason: str
        ready_at: datetime
        via: str | None = None

    class Cancelled(Aggregate.Event):
        TOPIC = "jobledger:ExecutionCancelled"
        by: str
        reason: str
        via: str | None = None

    class Discarded(Aggregate.Event):
        TOPIC = "jobledger:ExecutionDiscarded"
        by: str
        reason: str
        via: str | None = None
        # The attempt whose handler discarded the run; None for a dead letter an
        # operator discarded (and in older events).
        lease_id: uuid.UUID | None = None

    class Replaced(Aggregate.Event):
        """A duplicate of a unique run swapped the pending run's payload."""

        TOPIC = "jobledger:ExecutionReplaced"
        payload: dict[str, Any]
        by: str
        via: str | None = None

    class Debounced(Aggregate.Event):
        """A duplicate of a unique run swapped its payload and moved its start."""

        TOPIC = "jobledger:ExecutionDebounced"
        payload: dict[str, Any]
        ready_at: datetime
        by: str
        via: str | None = None

    class Progressed(Aggregate.Event):
        TOPIC = "jobledger:ExecutionProgressed"
        lease_id: uuid.UUID
        progress: Progress

    class Logged(Aggregate.Event):
        """Lines the running attempt's handler logged (ADR 104): kept with the run, read
        by no projection (``FOLLOWED``), so a chatty handler costs no follower a thing."""

        TOPIC = "jobledger:ExecutionLogged"
        FOLLOWED = False
        lease_id: uuid.UUID
        attempt: int
        lines: list[LogLine]
        dropped: int = 0  # lines past the attempt's bound: counted, not kept

    class Throttled(Aggregate.Event):
        """The run was due but waited for a limit: recorded once per run, so its
        history says why it started late."""

        TOPIC = "jobledger:ExecutionThrottled"
        kind: str  # a LimitKind value
        limit: str  # the key it waited for
        at: datetime

    @event(Enqueued)
    def __init__(
        self,
        *,
        job_id: uuid.UUID | None,
        spec: ExecutionSpec,
        trigger: Trigger,
        scheduled_for: datetime | None,
        trigger_key: str | None,
        ready_at: datetime,
        attempt: int,
        upstream_results: dict[str, Any] | None = None,
        workflow_id: uuid.UUID | None = None,
        step: str | None = None,
        by: str | None = None,
        via: str | None = None,
        reason: str | None = None,
    ) -> None:
        """The run as its first event leaves it: pending, or, begun by ``Skipped``
        (which alone carries a ``reason``), decided never to run."""
        self.job_id = job_id
        self.enqueued_by = by
        self.enqueued_via = via
        self.upstream_results = upstream_results
        self.workflow_id = workflow_id
        self.step = step
        self.result: dict[str, Any] | None = None
        self.trigger_key = trigger_key
        self.spec = spec
        self.trigger = trigger
        self.scheduled_for = scheduled_for
        self.ready_at = ready_at
        self.status = ExecutionStatus.PENDING if reason is None else ExecutionStatus.SKIPPED
        # Counted attempts so far; a deferral does not count, a lease expiry does.
        self.attempts_used = attempt - 1
        # attempts_used when the current budget began (moves on a requeue from the DLQ).
        self.budget_start = 0
        self.lease_id: uuid.UUID | None = None
        self.lease_attempt = 0
        self.worker_id: str | None = None
        self.lease_expires_at: datetime | None = None
        self.last_error: str | None = reason
        # The last progress the log recorded for the current attempt.
        self.progress: Progress | None = None
        # The limit key the run first waited for, if it ever did.
        self.throttled_by: str | None = None

    # ---- commands -------------------------------------------------------------------

    @staticmethod
    def create_id(
        job_id: uuid.UUID | None,
        scheduled_for: datetime | None,
        trigger_key: str | None,
        workflow_id: uuid.UUID | None = None,
        step: str | None = None,
    ) -> uuid.UUID:
        """Deterministic where a second request must collide with the first."""
        if workflow_id is not None and step is not None:
            return step_execution_id(workflow_id, step)
        if job_id is not None and scheduled_for is not None:
            return occurrence_execution_id(job_id, scheduled_for)
        if trigger_key is not None:
            return trigger_execution_id(job_id, trigger_key)
        return uuid.uuid4()

    @classmethod
    def enqueue(
        cls,
        *,
        spec: ExecutionSpec,
        ready_at: datetime,
        trigger: Trigger,
        job_id: uuid.UUID | None = None,
        scheduled_for: datetime | None = None,
        trigger_key: str | None = None,
        upstream_results: dict[str, Any] | None = None,
        workflow_id: uuid.UUID | None = None,
        step: str | None = None,
        by: str | None = None,
        via: str | None = None,
    ) -> "Execution":
        """A scheduled occurrence, a workflow step, or a run with a client key, gets a
        deterministic id. ``by`` and ``via``: who asked for it, for a run on request."""
        check_request(spec, ready_at=ready_at, trigger_key=trigger_key, by=by)
        return cls._create(
            cls.Enqueued,
            job_id=job_id,
            spec=spec.resolved(),
            trigger=trigger,
            scheduled_for=scheduled_for,
            trigger_key=trigger_key,
            ready_at=ready_at,
            attempt=1,
            upstream_results=upstream_results,
            workflow_id=workflow_id,
            step=step,
            by=by,
            via=via,
        )

    @classmethod
    def enqueued(
        cls,
        *,
        spec: ExecutionSpec,
        ready_at: datetime,
        trigger: Trigger,
        trigger_key: str | None = None,
        by: str | None = None,
        via: str | None = None,
    ) -> "Execution.Enqueued":
        """The event ``enqueue`` records for a run of no job: a bulk path saves the
        events alone. ``enqueued(...).mutate(None)`` is the run ``enqueue`` makes."""
        run = cls.enqueue(
            spec=spec, ready_at=ready_at, trigger=trigger, trigger_key=trigger_key, by=by, via=via
        )
        (enqueued,) = run.collect_events()
        return typing.cast("Execution.Enqueued", enqueued)

    @classmethod
    def skip(
        cls,
        *,
        job_id: uuid.UUID,
        spec: ExecutionSpec,
        scheduled_for: datetime,
        at: datetime,
        reason: str,
        upstreams: tuple[uuid.UUID, ...],
    ) -> "Execution":
        """The occurrence's execution, decided never to run (see ``Skipped``)."""
        return cls._create(
            cls.Skipped,
            id=occurrence_execution_id(job_id, scheduled_for),
            job_id=job_id,
            spec=spec,
            trigger=Trigger.DEPENDENCY,
            scheduled_for=scheduled_for,
            trigger_key=None,
            ready_at=at,
            attempt=1,
            reason=storable_text(reason),
            upstreams=upstreams,
        )

    def lease(self, *, worker_id: str, lease_id: uuid.UUID, lease_expires_at: datetime) -> None:
        self._check_status(ExecutionStatus.PENDING, action="lease")
        self._check_budget_left()
        self._leased(
            attempt=self.attempts_used + 1,
            worker_id=worker_id,
            lease_id=lease_id,
            lease_expires_at=lease_expires_at,
        )

    def complete(self, *, lease_id: uuid.UUID, duration: timedelta, result: dict[str, Any]) -> None:
        self._check_current_lease(lease_id)
        self._completed(lease_id=lease_id, duration=duration, result=result)

    def replace_payload(
        self,
        *,
        payload: dict[str, Any],
        by: str,
        ready_at: datetime | None = None,
        via: str | None = None,
    ) -> None:
        """Run the pending execution with ``payload`` instead, and from ``ready_at`` if
        given (a debounce). The payload is checked by whoever sent it."""
        self._check_status(ExecutionStatus.PENDING, action="replace the payload of")
        if ready_at is None:
            self._replaced(payload=payload, by=by, via=via)
        else:
            self._debounced(payload=payload, ready_at=ready_at, by=by, via=via)

    def report_progress(self, *, lease_id: uuid.UUID, progress: Progress) -> None:
        """Record how far the running attempt has got (the worker throttles reports)."""
        self._check_current_lease(lease_id)
        progress.check()
        self._progressed(lease_id=lease_id, progress=progress)

    def record_log(self, *, lease_id: uuid.UUID, lines: list[LogLine], dropped: int = 0) -> None:
        """Record lines the running attempt's handler logged (the worker bounds them)."""
        self._check_current_lease(lease_id)
        if not lines and not dropped:
            raise InvalidTransitionError(f"execution {self.id}: no lines to record")
        self._logged(lease_id=lease_id, attempt=self.lease_attempt, lines=lines, dropped=dropped)

    def throttle(self, *, kind: str, limit: str, at: datetime) -> None:
        """Record that the due run waits for ``limit``; only the first wait is recorded."""
        self._check_status(ExecutionStatus.PENDING, action="throttle")
        if self.throttled_by is not None:
            raise InvalidTransitionError(
                f"execution {self.id} already waited for {self.throttled_by}: recorded once"
            )
        self._throttled(kind=kind, limit=limit, at=at)

    def fail(self, *, lease_id: uuid.UUID, error: str, at: datetime, rand: float = 1.0) -> None:
        """Record a failed attempt: retry with backoff, or dead-letter when the budget is spent."""
        self._check_current_lease(lease_id)
        self._settle_failure(lease_id=lease_id, error=storable_text(error), at=at, rand=rand)

    def expire_lease(self, *, lease_id: uuid.UUID, at: datetime, rand: float = 1.0) -> None:
        """The lease ran out with no report: that counts as a failed attempt."""
        self._check_current_lease(lease_id)
        self._lease_expired(lease_id=lease_id)
        self._settle_failure(lease_id=lease_id, error=LEASE_EXPIRED_ERROR, at=at, rand=rand)

    def defer(self, *, lease_id: uuid.UUID, reason: str, ready_at: datetime) -> None:
        """Hand the execution back without spending an attempt (e.g. circuit open)."""
        self._check_current_lease(lease_id)
        self._deferred(lease_id=lease_id, reason=storable_text(reason), ready_at=ready_at)

    def fail_permanently(self, *, lease_id: uuid.UUID, error: str) -> None:
        """The handler says no attempt can succeed: dead-letter now, whatever is left of
        the budget (a requeue from the dead-letter queue still gives a fresh one)."""
        self._check_current_lease(lease_id)
        self._dead_lettered(
            lease_id=lease_id,
            error=PERMANENT_FAILURE + storable_text(error),
            attempts=self.lease_attempt,
            permanent=True,
        )

    def snooze(self, *, lease_id: uuid.UUID, reason: str, delay: timedelta, at: datetime) -> None:
        """The handler asks to run again ``delay`` after ``at``: the attempt is given
        back, not spent (unlike a retry), and the run is pending until then."""
        self._check_current_lease(lease_id)
        check_snooze(delay)
        self._snoozed(lease_id=lease_id, reason=storable_text(reason), ready_at=at + delay)

    def drop(self, *, lease_id: uuid.UUID, reason: str) -> None:
        """The handler discards its run: it ends, not failed, and is not tried again."""
        self._check_current_lease(lease_id)
        self._discarded(by=BY_HANDLER, reason=storable_text(reason), via=None, lease_id=lease_id)

    def expire(self, *, at: datetime) -> None:
        """Discard a pending run whose ``expires_at`` passed before any worker leased
        it (see ``expired_by``)."""
        self._check_status(ExecutionStatus.PENDING, action="expire")
        expires_at = self.spec.expires_at
        if expires_at is None or at < expires_at:
            raise InvalidTransitionError(
                f"execution {self.id} has not expired at {at.isoformat()}"
                f" (expires_at: {expires_at.isoformat() if expires_at else 'none'})"
            )
        self._expired(expires_at=expires_at, at=at)

    def requeue(self, *, by: str, reason: str, at: datetime, via: str | None = None) -> None:
        """Give a dead-lettered execution a fresh attempt budget."""
        self._check_status(ExecutionStatus.DEAD_LETTERED, action="requeue")
        check_reason(by, reason)
        self._requeued(by=by, reason=reason, ready_at=at, via=via)

    def discard(self, *, by: str, reason: str, via: str | None = None) -> None:
        """Give up on a dead-lettered execution for good; its history stays in the log."""
        self._check_status(ExecutionStatus.DEAD_LETTERED, action="discard")
        check_reason(by, reason)
        self._discarded(by=by, reason=reason, via=via, lease_id=None)

    def bring_forward(self, *, by: str, reason: str, at: datetime, via: str | None = None) -> None:
        """Make a pending run that waits for a later time due at ``at`` (a retry now);
        its attempts stay as they are."""
        self._check_status(ExecutionStatus.PENDING, action="bring forward")
        if self.ready_at <= at:
            raise InvalidTransitionError(
                f"cannot bring forward execution {self.id}: it is due already"
                f" (since {self.ready_at.isoformat()})"
            )
        check_reason(by, reason)
        self._brought_forward(by=by, reason=reason, ready_at=at, via=via)

    def cancel(self, *, by: str, reason: str, via: str | None = None) -> None:
        self._check_not_terminal(action="cancel")
        check_reason(by, reason)
        self._cancelled(by=by, reason=reason, via=via)

    # ---- queries --------------------------------------------------------------------

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    def expired_by(self, at: datetime) -> bool:
        """Whether the run, still pending, has passed its ``expires_at`` at ``at``: a
        worker that leases it discards it instead of running it."""
        expires_at = self.spec.expires_at
        return (
            self.status is ExecutionStatus.PENDING and expires_at is not None and at >= expires_at
        )

    @property
    def attempts_in_budget(self) -> int:
        return self.attempts_used - self.budget_start

    @property
    def last_attempt(self) -> int:
        """The number of the last attempt the current budget allows. Attempts are
        numbered over the execution's whole life, so after a requeue this is the
        attempts used before it plus a fresh budget, not the retry policy's count."""
        return self.budget_start + self.spec.retry.max_attempts

    # ---- invariants -----------------------------------------------------------------

    def _check_status(self, expected: ExecutionStatus, *, action: str) -> None:
        if self.status is not expected:
            raise InvalidTransitionError(
                f"cannot {action} execution {self.id}: it is {self.status}, not {expected}"
            )

    def _check_not_terminal(self, *, action: str) -> None:
        if self.is_terminal:
            raise InvalidTransitionError(
                f"cannot {action} execution {self.id}: it is already {self.status}"
            )

    def _check_budget_left(self) -> None:
        if self.attempts_in_budget >= self.spec.retry.max_attempts:
            raise InvalidTransitionError(
                f"execution {self.id} has used all {self.spec.retry.max_attempts} attempts"
                f" of its budget (attempt {self.last_attempt} was the last);"
                " requeue it from the dead-letter queue for a fresh budget"
            )

    def _check_current_lease(self, lease_id: uuid.UUID) -> None:
        if self.status is not ExecutionStatus.RUNNING or lease_id != self.lease_id:
            raise StaleLeaseError(
                f"lease {lease_id} is not the current lease of execution {self.id} "
                f"(status {self.status}); the report was not applied"
            )

    def _settle_failure(
        self, *, lease_id: uuid.UUID, error: str, at: datetime, rand: float
    ) -> None:
        attempt = self.lease_attempt
        if attempt - self.budget_start < self.spec.retry.max_attempts:
            delay = self.spec.retry.backoff(attempt - self.budget_start, rand)
            self._retried(
                lease_id=lease_id, error=error, next_attempt=attempt + 1, ready_at=at + delay
            )
        else:
            self._dead_lettered(lease_id=lease_id, error=error, attempts=attempt, permanent=False)

    # ---- event application ----------------------------------------------------------

    @event(Leased)
    def _leased(
        self, *, attempt: int, worker_id: str, lease_id: uuid.UUID, lease_expires_at: datetime
    ) -> None:
        self.status = ExecutionStatus.RUNNING
        self.lease_attempt = attempt
        self.worker_id = worker_id
        self.lease_id = lease_id
        self.lease_expires_at = lease_expires_at
        self.progress = None

    @event(Completed)
    def _completed(
        self, *, lease_id: uuid.UUID, duration: timedelta, result: dict[str, Any]
    ) -> None:
        del lease_id, duration
        self.attempts_used = self.lease_attempt
        self.status = ExecutionStatus.COMPLETED
        self.result = result
        self._clear_lease()

    @event(Expired)
    def _expired(self, *, expires_at: datetime, at: datetime) -> None:
        del at
        self.status = ExecutionStatus.DISCARDED
        self.last_error = expiry_reason(expires_at)

    @event(Replaced)
    def _replaced(self, *, payload: dict[str, Any], by: str, via: str | None = None) -> None:
        del by, via
        self.spec = msgspec.structs.replace(self.spec, payload=payload)

    @event(Debounced)
    def _debounced(
        self, *, payload: dict[str, Any], ready_at: datetime, by: str, via: str | None = None
    ) -> None:
        del by, via
        self.spec = msgspec.structs.replace(self.spec, payload=payload)
        self.ready_at = ready_at

    @event(Throttled)
    def _throttled(self, *, kind: str, limit: str, at: datetime) -> None:
        del kind, at
        self.throttled_by = limit

    @event(Logged)
    def _logged(
        self, *, lease_id: uuid.UUID, attempt: int, lines: list[LogLine], dropped: int
    ) -> None:
        del lease_id, attempt, lines, dropped  # the lines change nothing the run decides by

    @event(Progressed)
    def _progressed(self, *, lease_id: uuid.UUID, progress: Progress) -> None:
        del lease_id
        self.progress = progress

    @event(Retried)
    def _retried(
        self, *, lease_id: uuid.UUID, error: str, next_attempt: int, ready_at: datetime
    ) -> None:
        del lease_id, next_attempt
        self.attempts_used = self.lease_attempt
        self.last_error = error
        self.ready_at = ready_at
        self.status = ExecutionStatus.PENDING
        self._clear_lease()

    @event(DeadLettered)
    def _dead_lettered(
        self, *, lease_id: uuid.UUID | None, error: str, attempts: int, permanent: bool = False
    ) -> None:
        del lease_id, permanent
        self.attempts_used = attempts
        self.last_error = error
        self.status = ExecutionStatus.DEAD_LETTERED
        self._clear_lease()

    @event(LeaseExpired)
    def _lease_expired(self, *, lease_id: uuid.UUID) -> None:
        # The lease stays recorded until the retry or dead-letter that follows settles it.
        del lease_id

    @event(Deferred)
    def _deferred(self, *, lease_id: uuid.UUID, reason: str, ready_at: datetime) -> None:
        del lease_id, reason
        self._give_back(ready_at)

    @event(Snoozed)
    def _snoozed(self, *, lease_id: uuid.UUID, reason: str, ready_at: datetime) -> None:
        del lease_id, reason
        self._give_back(ready_at)

    def _give_back(self, ready_at: datetime) -> None:
        """The attempt ends without counting: pending again from ``ready_at``."""
        self.ready_at = ready_at
        self.status = ExecutionStatus.PENDING
        self._clear_lease()

    @event(Requeued)
    def _requeued(
        self, *, by: str, reason: str, ready_at: datetime, via: str | None = None
    ) -> None:
        del by, reason, via
        self.budget_start = self.attempts_used
        self.ready_at = ready_at
        self.status = ExecutionStatus.PENDING

    @event(BroughtForward)
    def _brought_forward(
        self, *, by: str, reason: str, ready_at: datetime, via: str | None = None
    ) -> None:
        del by, reason, via
        self.ready_at = ready_at

    @event(Cancelled)
    def _cancelled(self, *, by: str, reason: str, via: str | None = None) -> None:
        del by, reason, via
        self.status = ExecutionStatus.CANCELLED
        self._clear_lease()

    @event(Discarded)
    def _discarded(
        self, *, by: str, reason: str, via: str | None = None, lease_id: uuid.UUID | None = None
    ) -> None:
        del by, via
        if lease_id is not None:  # the handler's own: its attempt was used
            self.attempts_used = self.lease_attempt
            self.last_error = reason
            self._clear_lease()
        self.status = ExecutionStatus.DISCARDED

    def _clear_lease(self) -> None:
        self.lease_id = None
        self.worker_id = None
        self.lease_expires_at = None


def check_request(
    spec: ExecutionSpec, *, ready_at: datetime, trigger_key: str | None, by: str | None
) -> None:
    """What a run must be to be enqueued, however its event is made."""
    if trigger_key is not None:
        check_text(trigger_key, "trigger_key", max_chars=MAX_KEY_CHARS)
    check_instant("ready_at", ready_at)
    if by is not None:
        check_actor(by)
    check_expiry(spec.expires_at, ready_at)


def check_expiry(expires_at: datetime | None, ready_at: datetime) -> None:
    """A start-by deadline is an instant after the run is due (else it never runs)."""
    if expires_at is None:
        return
    check_instant("expires_at", expires_at)
    if expires_at <= ready_at:
        raise InvalidDefinitionError(
            "expires_at",
            f"{expires_at.isoformat()} is not after the run is due ({ready_at.isoformat()})",
            "give a start-by time after run_at (or after now), or leave expires_at out",
        )


def expiry_reason(expires_at: datetime) -> str:
    return f"not started by its expires_at {expires_at.isoformat()}"
