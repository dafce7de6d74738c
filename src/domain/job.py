"""The Job aggregate: a definition, its schedule, and every fire decision."""

import enum
import typing
import uuid
from datetime import datetime
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event
from eventsourcing.domain import Snapshot as AggregateSnapshot

from jobledger.domain.definitions import DEFAULT_LIMITS, JobDefinition, Limits
from jobledger.domain.errors import InvalidTransitionError, JobNotActiveError, ManagedJobError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.json_values import MAX_KEY_CHARS, check_actor, check_reason, check_text
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.schedules import MissedFires, first_fire, next_fire_after

# Namespace for job ids derived from a client key, so a retried create is idempotent.
JOB_NAMESPACE = uuid.UUID("0f7c1c53-8a52-4c5e-a8e3-3b8f9f1d6a41")
# Namespace for jobs that code declares (``jobledger apply``), by key and incarnation.
CODE_NAMESPACE = uuid.UUID("8d1e6b7a-2c4f-4e5a-9b3d-7f0a1c2e3d4b")
API = "api"
CODE = "code"


class MissReason(enum.StrEnum):
    """Why occurrences were not fired."""

    DOWNTIME = "downtime"  # late beyond the misfire grace: the misfire policy decided
    OVERLAP = "overlap"  # an earlier run was still open: the overlap policy decided


def job_id_for_key(key: str) -> uuid.UUID:
    return uuid.uuid5(JOB_NAMESPACE, key)


def managed_job_id(key: str, incarnation: int = 0) -> uuid.UUID:
    """The id of the job code declares as ``key``. A managed job that was deleted keeps
    its history; declaring the key again creates the next incarnation."""
    return uuid.uuid5(CODE_NAMESPACE, f"{incarnation}:{key}")


class JobState(msgspec.Struct, kw_only=True):
    """A job's attributes as a snapshot holds them, typed so that a stored snapshot
    decodes back into datetimes and the definition (names as the aggregate has them)."""

    created_on: datetime = msgspec.field(name="_created_on")
    modified_on: datetime = msgspec.field(name="_modified_on")
    definition: JobDefinition
    key: str | None
    next_fire_at: datetime | None
    paused: bool
    deleted: bool
    last_scheduled_for: datetime | None
    fired_count: int
    source: str = API

    def attributes(self) -> dict[str, Any]:
        return {f.encode_name: getattr(self, f.name) for f in msgspec.structs.fields(self)}


class Job(Aggregate):
    """A job definition and its schedule."""

    TOPIC = "jobledger:Job"

    class Snapshot(AggregateSnapshot):
        """The job at one version: a cold load replays only the events after it."""

        TOPIC = "jobledger:JobSnapshot"
        # Typed for the mapper, which decodes a stored snapshot against these hints.
        state: JobState  # type: ignore[assignment]

        def mutate(self, _: None) -> "Job":
            if isinstance(self.state, JobState):
                # The store hands back the typed state; the base class wants the dict.
                object.__setattr__(self, "state", self.state.attributes())
            return typing.cast("Job", super().mutate(_))

    class Created(Aggregate.Created):
        # Never emitted (jobs begin with Scheduled); eventsourcing wants every event
        # class of an aggregate with a stable topic to have one.
        TOPIC = "jobledger:JobCreated"

    # ``source`` is who defines the job: "api" (people, over the API or the dashboard)
    # or "code" (``jobledger apply``). ``override`` marks a change by hand to a job that
    # code manages. Both have defaults, so events stored before them decode.
    class Scheduled(Aggregate.Created):
        TOPIC = "jobledger:JobScheduled"
        definition: JobDefinition
        key: str | None
        next_fire_at: datetime | None
        by: str
        source: str = API

    class Updated(Aggregate.Event):
        TOPIC = "jobledger:JobUpdated"
        definition: JobDefinition
        next_fire_at: datetime | None
        by: str
        source: str = API
        override: bool = False

    class Paused(Aggregate.Event):
        TOPIC = "jobledger:JobPaused"
        by: str
        reason: str

    class Resumed(Aggregate.Event):
        TOPIC = "jobledger:JobResumed"
        by: str
        next_fire_at: datetime | None

    class Deleted(Aggregate.Event):
        TOPIC = "jobledger:JobDeleted"
        by: str
        source: str = API
        override: bool = False

    class Fired(Aggregate.Event):
        TOPIC = "jobledger:JobFired"
        scheduled_for: datetime
        execution_id: uuid.UUID
        next_fire_at: datetime | None
        leader_epoch: int

    class FiresMissed(Aggregate.Event):
        TOPIC = "jobledger:JobFiresMissed"
        first: datetime
        last: datetime
        count: int
        reason: MissReason
        policy: str  # the misfire or overlap policy that decided it
        next_fire_at: datetime | None

    class Triggered(Aggregate.Event):
        TOPIC = "jobledger:JobTriggered"
        execution_id: uuid.UUID
        trigger_key: str
        by: str

    @event(Scheduled)
    def __init__(
        self,
        *,
        definition: JobDefinition,
        key: str | None,
        next_fire_at: datetime | None,
        by: str,
        source: str = API,
    ) -> None:
        del by
        self.definition = definition
        self.key = key
        self.source = source
        self.next_fire_at = next_fire_at
        self.paused = False
        self.deleted = False
        self.last_scheduled_for: datetime | None = None
        self.fired_count = 0

    # ---- commands -------------------------------------------------------------------

    @staticmethod
    def create_id(key: str | None) -> uuid.UUID:
        return job_id_for_key(key) if key else uuid.uuid4()

    @classmethod
    def schedule(
        cls,
        definition: JobDefinition,
        *,
        at: datetime,
        by: str,
        key: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> "Job":
        return cls(key=key, source=API, **cls._created(definition, at=at, by=by, limits=limits))

    @classmethod
    def declare(
        cls,
        definition: JobDefinition,
        *,
        key: str,
        incarnation: int,
        at: datetime,
        by: str,
        limits: Limits = DEFAULT_LIMITS,
    ) -> "Job":
        """A job that code declares as ``key`` (``jobledger apply``)."""
        check_text(key, "key", max_chars=MAX_KEY_CHARS)
        created = cls._created(definition, at=at, by=by, limits=limits)
        # The id is the key's, not one create_id() derives: eventsourcing's _create
        # takes it beside the created event's fields.
        return cls._create(
            cls.Scheduled, id=managed_job_id(key, incarnation), key=key, source=CODE, **created
        )

    @staticmethod
    def _created(
        definition: JobDefinition, *, at: datetime, by: str, limits: Limits
    ) -> dict[str, Any]:
        """The fields of a JobScheduled every new job has, checked."""
        definition.check(limits)
        check_actor(by)
        return {
            "definition": definition,
            "next_fire_at": first_fire(definition.schedule, at),
            "by": by,
        }

    @property
    def managed(self) -> bool:
        """Whether code defines this job (``jobledger apply``)."""
        return self.source == CODE

    def update(
        self,
        definition: JobDefinition,
        *,
        at: datetime,
        by: str,
        limits: Limits = DEFAULT_LIMITS,
        source: str = API,
        override: bool = False,
    ) -> None:
        """Change the definition. A job code manages changes by code (``source`` "code"),
        or by hand with ``override``, which the event records."""
        self._check_not_deleted("update")
        self._check_may_change("update", source=source, override=override)
        check_actor(by)
        definition.check(limits)
        next_fire = (
            None
            if self.paused
            else first_fire(definition.schedule, at, last=self.last_scheduled_for)
        )
        self._updated(
            definition=definition,
            next_fire_at=next_fire,
            by=by,
            source=source,
            override=override and self.managed and source != CODE,
        )

    def pause(self, *, by: str, reason: str = "") -> None:
        self._check_not_deleted("pause")
        check_reason(by, reason)
        if not self.paused:
            self._paused(by=by, reason=reason)

    def resume(self, *, at: datetime, by: str) -> None:
        """Resume from ``at``: occurrences that fell while paused are not caught up."""
        self._check_not_deleted("resume")
        check_actor(by)
        if self.paused:
            # Never before an occurrence already fired or missed, even if ``at`` is.
            last = self.last_scheduled_for
            start = at if last is None else max(at, last)
            self._resumed(by=by, next_fire_at=next_fire_after(self.definition.schedule, start))

    def delete(self, *, by: str, source: str = API, override: bool = False) -> None:
        """Delete the job (its history stays); a managed one as ``update`` says."""
        check_actor(by)
        if not self.deleted:
            self._check_may_change("delete", source=source, override=override)
            self._deleted(
                by=by, source=source, override=override and self.managed and source != CODE
            )

    def fire(self, *, scheduled_for: datetime, leader_epoch: int, at: datetime) -> Execution:
        """Fire the due occurrence; the new execution must be saved with this job."""
        self._check_active()
        self._check_is_next_occurrence(scheduled_for)
        execution = Execution.enqueue(
            job_id=self.id,
            spec=self.definition.spec,
            trigger=Trigger.SCHEDULE,
            scheduled_for=scheduled_for,
            ready_at=max(scheduled_for, at),
        )
        self._fired(
            scheduled_for=scheduled_for,
            execution_id=execution.id,
            next_fire_at=next_fire_after(self.definition.schedule, scheduled_for),
            leader_epoch=leader_epoch,
        )
        return execution

    def record_missed_fires(
        self,
        missed: MissedFires,
        *,
        policy: MisfirePolicy | OverlapPolicy,
        reason: MissReason = MissReason.DOWNTIME,
    ) -> None:
        """Record occurrences that will never fire, so the history says why."""
        self._check_active()
        self._check_is_next_occurrence(missed.first)
        self._fires_missed(
            first=missed.first,
            last=missed.last,
            count=missed.count,
            reason=reason,
            policy=str(policy),
            next_fire_at=next_fire_after(self.definition.schedule, missed.last),
        )

    def trigger(self, *, trigger_key: str, at: datetime, by: str) -> Execution:
        """Run the job now, outside its schedule; the same key yields the same execution."""
        self._check_not_deleted("trigger")
        check_actor(by)
        execution = Execution.enqueue(
            job_id=self.id,
            spec=self.definition.spec,
            trigger=Trigger.MANUAL,
            trigger_key=trigger_key,
            ready_at=at,
        )
        self._triggered(execution_id=execution.id, trigger_key=trigger_key, by=by)
        return execution

    # ---- invariants -----------------------------------------------------------------

    def _check_not_deleted(self, action: str) -> None:
        if self.deleted:
            raise InvalidTransitionError(f"cannot {action} job {self.id}: it was deleted")

    def _check_may_change(self, action: str, *, source: str, override: bool) -> None:
        if self.managed and source != CODE and not override:
            raise ManagedJobError(
                f"cannot {action} job {self.id} by hand: code manages it (key {self.key!r}); "
                "change it in code and run `jobledger apply`, or repeat with override=true "
                "to change it by hand (recorded; the next apply puts the code's version back)"
            )

    def _check_active(self) -> None:
        if self.deleted or self.paused:
            state = "deleted" if self.deleted else "paused"
            raise JobNotActiveError(f"job {self.id} is {state}; resume it to fire")

    def _check_is_next_occurrence(self, scheduled_for: datetime) -> None:
        if self.next_fire_at is None or scheduled_for != self.next_fire_at:
            raise InvalidTransitionError(
                f"job {self.id}: {scheduled_for.isoformat()} is not the next occurrence "
                f"({self.next_fire_at.isoformat() if self.next_fire_at else 'none due'})"
            )

    # ---- event application ----------------------------------------------------------

    @event(Updated)
    def _updated(
        self,
        *,
        definition: JobDefinition,
        next_fire_at: datetime | None,
        by: str,
        source: str = API,
        override: bool = False,
    ) -> None:
        del by, source, override
        self.definition = definition
        self.next_fire_at = next_fire_at

    @event(Paused)
    def _paused(self, *, by: str, reason: str) -> None:
        del by, reason
        self.paused = True
        self.next_fire_at = None

    @event(Resumed)
    def _resumed(self, *, by: str, next_fire_at: datetime | None) -> None:
        del by
        self.paused = False
        self.next_fire_at = next_fire_at

    @event(Deleted)
    def _deleted(self, *, by: str, source: str = API, override: bool = False) -> None:
        del by, source, override
        self.deleted = True
        self.next_fire_at = None

    @event(Fired)
    def _fired(
        self,
        *,
        scheduled_for: datetime,
        execution_id: uuid.UUID,
        next_fire_at: datetime | None,
        leader_epoch: int,
    ) -> None:
        del execution_id, leader_epoch
        self.last_scheduled_for = scheduled_for
        self.next_fire_at = next_fire_at
        self.fired_count += 1

    @event(FiresMissed)
    def _fires_missed(
        self,
        *,
        first: datetime,
        last: datetime,
        count: int,
        reason: MissReason,
        policy: str,
        next_fire_at: datetime | None,
    ) -> None:
        del first, count, reason, policy
        self.last_scheduled_for = last
        self.next_fire_at = next_fire_at

    @event(Triggered)
    def _triggered(self, *, execution_id: uuid.UUID, trigger_key: str, by: str) -> None:
        del execution_id, trigger_key, by
