"""The Execution aggregate: one run of a job, every attempt in one stream."""

import dataclasses
import enum
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, CanMutateAggregate, event
from eventsourcing.utils import get_topic

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

        def mutate(self, aggregate: Any) -> Any:  # noqa: ANN401 (the library's signature)
            """The run this event begins, as the library's ``mutate`` makes it, without
            matching the event's fields to the two initializers' parameters each time:
            every run a worker leases is loaded from it (ADR 68)."""
            if aggregate is not None:
                return super().mutate(aggregate)  # which refuses it
            run = Execution.__new__(Execution)
            run.__base_init__(self.originator_id, self.originator_version, self.timestamp)
            # The initializer's body, as the library's mutate calls it.
            Execution.__init__(
                run,
                job_id=self.job_id,
                spec=self.spec,
                trigger=self.trigger,
                scheduled_for=self.scheduled_for,
                trigger_key=self.trigger_key,
                ready_at=self.ready_at,
                attempt=self.attempt,
                upstream_results=self.upstream_results,
                workflow_id=self.workflow_id,
                step=self.step,
                by=self.by,
                via=self.via,
            )
            return run

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

        def apply(self, aggregate: "Execution") -> None:
            aggregate.status = ExecutionStatus.SKIPPED
            aggregate.last_error = self.reason

    class Leased(Aggregate.Event):
        TOPIC = "jobledger:ExecutionLeased"
        attempt: int
        worker_id: str
        lease_id: uuid.UUID
        lease_expires_at: datetime

        # The two events of every run a worker runs apply themselves, not through a
        # decorated method, which matches the event's fields to the method's parameters
        # each time (ADR 68).
        def apply(self, aggregate: "Execution") -> None:
            aggregate.status = ExecutionStatus.RUNNING
            aggregate.lease_attempt = self.attempt
            aggregate.worker_id = self.worker_id
            aggregate.lease_id = self.lease_id
            aggregate.lease_expires_at = self.lease_expires_at
            aggregate.progress = None

    class Completed(Aggregate.Event):
        TOPIC = "jobledger:ExecutionCompleted"
        lease_id: uuid.UUID
        duration: timedelta
        result: dict[str, Any]

        def apply(self, aggregate: "Execution") -> None:
            aggregate.attempts_used = aggregate.lease_attempt
            aggregate.status = ExecutionStatus.COMPLETED
            aggregate.result = self.result
            aggregate._clear_lease()  # noqa: SLF001 (an event of the aggregate applies itself)

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

        def apply(self, aggregate: "Execution") -> None:
            aggregate.status = ExecutionStatus.DISCARDED
            aggregate.last_error = expiry_reason(self.expires_at)

    class Requeued(Aggregate.Event):
        TOPIC = "jobledger:ExecutionRequeued"
        by: str
        reason: str
        ready_at: datetime
        via: str | None = None  # how ``by`` came (see ``Enqueued``); None before it existed

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
    ) -> None:
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
        self.status = ExecutionStatus.PENDING
        # Counted attempts so far; a deferral does not count, a lease expiry does.
        self.attempts_used = attempt - 1
        # attempts_used when the current budget began (moves on a requeue from the DLQ).
        self.budget_start = 0
        self.lease_id: uuid.UUID | None = None
        self.lease_attempt = 0
        self.worker_id: str | None = None
        self.lease_expires_at: datetime | None = None
        self.last_error: str | None = None
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
        if trigger_key is not None:
            check_text(trigger_key, "trigger_key", max_chars=MAX_KEY_CHARS)
        check_instant("ready_at", ready_at)
        if by is not None:
            check_actor(by)
        check_expiry(spec.expires_at, ready_at)
        # ``_create`` rather than the class's call, which matches the arguments to
        # ``__init__``'s signature first: every run fired or sent starts here (ADR 57).
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
        """The event ``enqueue`` records for a run of no job, without building the run:
        a bulk path that only saves it spends most of its time on the aggregate object
        otherwise. ``enqueued(...).mutate(None)`` is the run ``enqueue`` makes."""
        if trigger_key is not None:
            check_text(trigger_key, "trigger_key", max_chars=MAX_KEY_CHARS)
        check_instant("ready_at", ready_at)
        if by is not None:
            check_actor(by)
        check_expiry(spec.expires_at, ready_at)
        # Every field in the class's order, as its constructor would set them, without the
        # frozen dataclass's one check per field (a third of the cost of a batched run).
        fields = _ADHOC_ENQUEUED.copy()
        fields["originator_id"] = cls.create_id(None, None, trigger_key)
        fields["timestamp"] = cls.Enqueued.create_timestamp()
        fields["spec"] = spec.resolved()
        fields["trigger"] = trigger
        fields["trigger_key"] = trigger_key
        fields["ready_at"] = ready_at
        fields["by"] = by
        fields["via"] = via
        enqueued = object.__new__(cls.Enqueued)
        object.__setattr__(enqueued, "__dict__", fields)
        return enqueued

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
        # The event straight from its class: the decorated method's call matches its
        # arguments to the method's signature first, and a worker leases and completes
        # every run (ADR 57).
        self.trigger_event(
            self.Leased,
            attempt=self.attempts_used + 1,
            worker_id=worker_id,
            lease_id=lease_id,
            lease_expires_at=lease_expires_at,
        )

    def complete(self, *, lease_id: uuid.UUID, duration: timedelta, result: dict[str, Any]) -> None:
        self._check_current_lease(lease_id)
        self.trigger_event(self.Completed, lease_id=lease_id, duration=duration, result=result)

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
        self.trigger_event(self.Expired, expires_at=expires_at, at=at)

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

    def trigger_event(
        self,
        event_class: type[CanMutateAggregate[uuid.UUID]],
        **kwargs: Any,  # noqa: ANN401 (the library's signature: any event's fields)
    ) -> None:
        """eventsourcing's ``trigger_event``, without the frozen dataclass's constructor
        once a class has been through it (ADR 68): with the event's own fields in their
        declared order, as every command here passes them, the event is set up as its
        constructor would set it. Any other call goes the library's way, which checks
        the class's topic and reports a field missing or unknown."""
        if _OWN_FIELDS.get(event_class) != tuple(kwargs):
            super().trigger_event(event_class, **kwargs)
            _OWN_FIELDS.setdefault(event_class, _own_fields(event_class))
            return
        fields = {
            "originator_id": self.id,
            "originator_version": self.version + 1,
            "timestamp": event_class.create_timestamp(),
        }
        fields.update(kwargs)
        new_event = object.__new__(event_class)
        object.__setattr__(new_event, "__dict__", fields)
        new_event.mutate(self)
        self._pending_events.append(new_event)

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


# The fields an event class adds to the base's id, version and timestamp, in their
# declared order: by event class, once one of it was built by its constructor.
_OWN_FIELDS: dict[type, tuple[str, ...]] = {}
_BASE_FIELDS = frozenset({"originator_id", "originator_version", "timestamp"})


def _own_fields(event_class: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(event_class) if f.name not in _BASE_FIELDS)


_EXECUTION_TOPIC = get_topic(Execution)
# What ``Execution.enqueued`` records for every run of no job, made once by the class's
# constructor (a field added without a default fails here, not in a stored event); the
# run's own fields are filled in per run.
_ADHOC_ENQUEUED: dict[str, Any] = vars(
    Execution.Enqueued(  # type: ignore[call-arg]
        originator_id=ADHOC_NAMESPACE,
        originator_version=1,
        timestamp=datetime.min.replace(tzinfo=UTC),
        originator_topic=_EXECUTION_TOPIC,
        job_id=None,
        spec=ExecutionSpec(handler="template"),
        trigger=Trigger.ADHOC,
        scheduled_for=None,
        trigger_key=None,
        ready_at=datetime.min.replace(tzinfo=UTC),
        attempt=1,
    )
).copy()
