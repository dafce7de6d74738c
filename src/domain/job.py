"""The Job aggregate: a definition, its schedule, and every fire decision."""

import enum
import typing
import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

import msgspec
from eventsourcing.domain import Aggregate, event
from eventsourcing.domain import Snapshot as AggregateSnapshot
from eventsourcing.utils import register_topic

from jobledger.domain.backfill import BackfillPlan
from jobledger.domain.definitions import (
    DEFAULT_LIMITS,
    ExecutionSpec,
    JobDefinition,
    Limits,
    turn_limits,
)
from jobledger.domain.errors import InvalidTransitionError, JobNotActiveError, ManagedJobError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.json_values import MAX_KEY_CHARS, check_actor, check_reason, check_text
from jobledger.domain.policies import BackfillOverlap, MisfirePolicy, OverlapPolicy, ScheduleRule
from jobledger.domain.schedules import MissedFires, first_fire, next_fire_after, run_time

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
    EXCLUDED = "excluded"  # an excluded date or a calendar's holiday
    UPSTREAM_FAILED = "upstream_failed"  # an upstream run ended another way than awaited
    UPSTREAM_SKIPPED = "upstream_skipped"  # the upstream never ran this occurrence


class FireTrigger(enum.StrEnum):
    """What made the job fire an occurrence."""

    SCHEDULE = "schedule"
    BACKFILL = "backfill"
    DEPENDENCY = "dependency"


# Who the log names for what the ledger does by itself (pause_on_failure).
SYSTEM = "system"


def job_id_for_key(key: str) -> uuid.UUID:
    return uuid.uuid5(JOB_NAMESPACE, key)


def check_scope(scope: str | None) -> None:
    """A scope names a set of declared jobs: text of a key's length, or None."""
    if scope is not None:
        check_text(scope, "scope", max_chars=MAX_KEY_CHARS)


def managed_job_id(key: str, incarnation: int = 0) -> uuid.UUID:
    """The id of the job code declares as ``key``. A managed job that was deleted keeps
    its history; declaring the key again creates the next incarnation."""
    return uuid.uuid5(CODE_NAMESPACE, f"{incarnation}:{key}")


def job_reference(text: str) -> uuid.UUID:
    """A job named by its id, or by the key it was created with over the API (a key
    code declares needs the log to find its incarnation: see the use cases)."""
    try:
        return uuid.UUID(text)
    except ValueError:
        return job_id_for_key(text)


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
    # Added later: a snapshot taken before they existed decodes with these defaults.
    source: str = API
    backfill_queue: tuple[datetime, ...] = ()
    backfill_running: datetime | None = None
    skipped_through: dict[str, datetime] = msgspec.field(default_factory=dict)
    resumed_at: datetime | None = None
    scope: str | None = None

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
        # How ``by`` came ("session", "token:<name>", "cli"); None before it existed.
        via: str | None = None
        # The set of declared jobs a managed job belongs to (ADR 82); None: no scope.
        scope: str | None = None

    class Updated(Aggregate.Event):
        TOPIC = "jobledger:JobUpdated"
        definition: JobDefinition
        next_fire_at: datetime | None
        by: str
        source: str = API
        override: bool = False
        via: str | None = None
        # A change by code moves the job into this scope (None: no scope).
        scope: str | None = None

    class Paused(Aggregate.Event):
        TOPIC = "jobledger:JobPaused"
        by: str
        reason: str
        # The dead letter that paused it (pause_on_failure); None for an operator's pause.
        execution_id: uuid.UUID | None = None
        via: str | None = None

    class Resumed(Aggregate.Event):
        TOPIC = "jobledger:JobResumed"
        by: str
        next_fire_at: datetime | None
        at: datetime | None = None
        via: str | None = None

    class Deleted(Aggregate.Event):
        TOPIC = "jobledger:JobDeleted"
        by: str
        source: str = API
        override: bool = False
        via: str | None = None

    class Fired(Aggregate.Event):
        TOPIC = "jobledger:JobFired"
        scheduled_for: datetime
        execution_id: uuid.UUID
        next_fire_at: datetime | None
        leader_epoch: int
        trigger: FireTrigger = FireTrigger.SCHEDULE

    class FiresMissed(Aggregate.Event):
        TOPIC = "jobledger:JobFiresMissed"
        first: datetime
        last: datetime
        count: int
        reason: MissReason
        policy: str  # the misfire or overlap policy, or the job's rule, that decided it
        next_fire_at: datetime | None
        # The upstream job whose missed occurrences these mirror (upstream_skipped).
        upstream: uuid.UUID | None = None

    class Backfilled(Aggregate.Event):
        """A backfill of ``[start, end]`` was asked for; its fires follow in the same
        save, and ``buffered`` are the occurrences still to fire one at a time."""

        TOPIC = "jobledger:JobBackfilled"
        start: datetime
        end: datetime
        overlap: BackfillOverlap
        reason: str
        by: str
        occurrences: int
        already_fired: int
        excluded: int
        fired: int
        skipped: int
        buffered: tuple[datetime, ...]
        via: str | None = None

    class Triggered(Aggregate.Event):
        TOPIC = "jobledger:JobTriggered"
        execution_id: uuid.UUID
        trigger_key: str
        by: str
        via: str | None = None

    @event(Scheduled)
    def __init__(
        self,
        *,
        definition: JobDefinition,
        key: str | None,
        next_fire_at: datetime | None,
        by: str,
        source: str = API,
        via: str | None = None,
        scope: str | None = None,
    ) -> None:
        del by, via
        self.definition = definition
        self.key = key
        self.source = source
        self.scope = scope
        self.next_fire_at = next_fire_at
        self.paused = False
        self.deleted = False
        self.last_scheduled_for: datetime | None = None
        self.fired_count = 0
        # buffer_all backfills: the occurrences still to fire, and the one that runs.
        self.backfill_queue: tuple[datetime, ...] = ()
        self.backfill_running: datetime | None = None
        # Per upstream job (id as text): the last of its missed occurrences mirrored.
        self.skipped_through: dict[str, datetime] = {}
        self.resumed_at: datetime | None = None

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
        via: str | None = None,
    ) -> "Job":
        job_id = job_id_for_key(key) if key else None
        created = cls._created(definition, at=at, by=by, limits=limits, job_id=job_id)
        return cls(key=key, source=API, via=via, scope=None, **created)

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
        via: str | None = None,
        scope: str | None = None,
    ) -> "Job":
        """A job that code declares as ``key`` (``jobledger apply``) in ``scope``."""
        check_text(key, "key", max_chars=MAX_KEY_CHARS)
        check_scope(scope)
        job_id = managed_job_id(key, incarnation)
        created = cls._created(definition, at=at, by=by, limits=limits, job_id=job_id)
        # The id is the key's, not one create_id() derives: eventsourcing's _create
        # takes it beside the created event's fields.
        return cls._create(
            cls.Scheduled, id=job_id, key=key, source=CODE, via=via, scope=scope, **created
        )

    @staticmethod
    def _created(
        definition: JobDefinition,
        *,
        at: datetime,
        by: str,
        limits: Limits,
        job_id: uuid.UUID | None,
    ) -> dict[str, Any]:
        """The fields of a JobScheduled every new job has, checked (``job_id``, when it
        is known before the job exists, so that the job may not depend on itself)."""
        definition.check(limits, job_id=job_id)
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
        via: str | None = None,
        scope: str | None = None,
    ) -> None:
        """Change the definition. A job code manages changes by code (``source`` "code"),
        or by hand with ``override``, which the event records. A change by code puts
        the job in ``scope``; a change by hand keeps its scope."""
        self._check_not_deleted("update")
        check_scope(scope)
        self._check_may_change("update", source=source, override=override)
        check_actor(by)
        definition.check(limits, job_id=self.id)
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
            via=via,
            scope=scope if source == CODE else self.scope,
        )

    def pause(self, *, by: str, reason: str = "", via: str | None = None) -> None:
        self._check_not_deleted("pause")
        check_reason(by, reason)
        if not self.paused:
            self._paused(by=by, reason=reason, execution_id=None, via=via)

    def resume(self, *, at: datetime, by: str, via: str | None = None) -> None:
        """Resume from ``at``: occurrences that fell while paused are not caught up."""
        self._check_not_deleted("resume")
        check_actor(by)
        if self.paused:
            # Never before an occurrence already fired or missed, even if ``at`` is.
            last = self.last_scheduled_for
            start = at if last is None else max(at, last)
            self._resumed(
                by=by,
                next_fire_at=next_fire_after(self.definition.schedule, start),
                at=at,
                via=via,
            )

    def delete(
        self, *, by: str, source: str = API, override: bool = False, via: str | None = None
    ) -> None:
        """Delete the job (its history stays); a managed one as ``update`` says."""
        check_actor(by)
        if not self.deleted:
            self._check_may_change("delete", source=source, override=override)
            self._deleted(
                by=by,
                source=source,
                override=override and self.managed and source != CODE,
                via=via,
            )

    def fire(self, *, scheduled_for: datetime, leader_epoch: int, at: datetime) -> Execution:
        """Fire the due occurrence; the new execution must be saved with this job. It
        is ready at the occurrence plus its jitter (or at once, if that has passed)."""
        self._check_active()
        self._check_is_next_occurrence(scheduled_for)
        ready_at = max(run_time(self.definition.schedule, self.id, scheduled_for), at)
        return self._fire(
            scheduled_for,
            FireTrigger.SCHEDULE,
            ready_at=ready_at,
            next_fire_at=next_fire_after(self.definition.schedule, scheduled_for),
            leader_epoch=leader_epoch,
        )

    def _fire(
        self,
        scheduled_for: datetime,
        trigger: FireTrigger,
        *,
        ready_at: datetime,
        next_fire_at: datetime | None,
        leader_epoch: int = 0,
        upstream_results: dict[str, Any] | None = None,
        asked: tuple[str, str | None] | None = None,
    ) -> Execution:
        """``asked``: who asked for the fire and how they came (a backfill), if anyone."""
        by, via = (None, None) if asked is None else asked
        execution = Execution.enqueue(
            job_id=self.id,
            spec=self._run_spec(),
            trigger=Trigger(trigger.value),
            scheduled_for=scheduled_for,
            ready_at=ready_at,
            upstream_results=upstream_results,
            by=by,
            via=via,
        )
        self._fired(
            scheduled_for=scheduled_for,
            execution_id=execution.id,
            next_fire_at=next_fire_at,
            leader_epoch=leader_epoch,
            trigger=trigger,
        )
        return execution

    # ---- backfill ---------------------------------------------------------------------

    def backfill(
        self,
        plan: BackfillPlan,
        *,
        at: datetime,
        by: str,
        reason: str = "",
        via: str | None = None,
    ) -> list[Execution]:
        """Carry out a backfill plan (see ``domain/backfill.py``): fire what it fires now,
        record what it skips, keep what it buffers. Works on a paused job: filling the
        time it was paused is what a backfill is for."""
        self._check_not_deleted("backfill")
        check_reason(by, reason)
        self._backfilled(
            start=plan.start,
            end=plan.end,
            overlap=plan.overlap,
            reason=reason,
            by=by,
            occurrences=len(plan.occurrences),
            already_fired=len(plan.already_fired),
            excluded=len(plan.excluded),
            fired=len(plan.fire),
            skipped=len(plan.skip),
            buffered=plan.buffer,
            via=via,
        )
        executions = [
            self._fire(
                o,
                FireTrigger.BACKFILL,
                ready_at=at,
                next_fire_at=self.next_fire_at,
                asked=(by, via),
            )
            for o in plan.fire
        ]
        for run in plan.skipped_runs():
            self._missed_here(run, MissReason.OVERLAP, BackfillOverlap.SKIP)
        return executions

    def release_backfill(
        self,
        *,
        finished: datetime,
        fired: Collection[datetime],
        at: datetime,
        leader_epoch: int = 0,
    ) -> Execution | None:
        """The buffered backfill run for ``finished`` ended: fire the next buffered
        occurrence that has no execution yet (``fired`` lists those that have). Nothing
        if ``finished`` is not the run the buffer waits for (a replay, or another run)."""
        if self.deleted or finished != self.backfill_running:
            return None
        following = next((o for o in self.backfill_queue if o not in fired), None)
        if following is None:
            return None
        return self._fire(
            following,
            FireTrigger.BACKFILL,
            ready_at=at,
            next_fire_at=self.next_fire_at,
            leader_epoch=leader_epoch,
        )

    # ---- dependencies -----------------------------------------------------------------

    def fire_dependency(
        self,
        *,
        scheduled_for: datetime,
        at: datetime,
        upstream_results: dict[str, Any],
        leader_epoch: int = 0,
    ) -> Execution | None:
        """Fire the occurrence its upstream runs released; nothing while paused or
        deleted (a paused job fires nothing; a backfill fills the gap later)."""
        if self.paused or self.deleted:
            return None
        return self._fire(
            scheduled_for,
            FireTrigger.DEPENDENCY,
            ready_at=at,
            next_fire_at=self.next_fire_at,
            leader_epoch=leader_epoch,
            upstream_results=upstream_results,
        )

    def skip_dependency(
        self, *, scheduled_for: datetime, at: datetime, failed: dict[uuid.UUID, str]
    ) -> Execution | None:
        """Record that the occurrence will not run: ``failed`` are the upstream runs
        (execution id -> how each ended) that did not end as awaited. Returns its
        execution, decided as skipped (nothing while paused or deleted)."""
        if self.paused or self.deleted:
            return None
        ended = ", ".join(f"{run} {status}" for run, status in failed.items())
        execution = Execution.skip(
            job_id=self.id,
            spec=self.definition.spec,
            scheduled_for=scheduled_for,
            at=at,
            reason=f"upstream failed: {ended}",
            upstreams=tuple(failed),
        )
        once = MissedFires(first=scheduled_for, last=scheduled_for, count=1)
        self._missed_here(once, MissReason.UPSTREAM_FAILED, ScheduleRule.DEPENDENCIES)
        return execution

    def mirror_upstream_misses(self, upstream: uuid.UUID, missed: MissedFires) -> bool:
        """Record that the upstream job never ran the occurrences of ``missed``, so this
        job will not either; once per upstream run of misses (replays are no-ops).
        Returns whether it recorded anything."""
        if self.paused or self.deleted:
            return False
        through = self.skipped_through.get(str(upstream))
        if through is not None and missed.last <= through:
            return False
        self._missed_here(
            missed, MissReason.UPSTREAM_SKIPPED, ScheduleRule.DEPENDENCIES, upstream=upstream
        )
        return True

    def _missed_here(
        self,
        missed: MissedFires,
        reason: MissReason,
        policy: BackfillOverlap | ScheduleRule,
        *,
        upstream: uuid.UUID | None = None,
    ) -> None:
        """Occurrences off the schedule's path (past, or another job's) recorded missed:
        the next fire stays as it is."""
        self._fires_missed(
            first=missed.first,
            last=missed.last,
            count=missed.count,
            reason=reason,
            policy=str(policy),
            next_fire_at=self.next_fire_at,
            upstream=upstream,
        )

    def pause_for_failure(self, *, execution_id: uuid.UUID, dead_at: datetime) -> bool:
        """pause_on_failure: the dead letter ``execution_id`` pauses the job, by
        ``system``; not if it died before the job was last resumed (an operator already
        saw to it), nor if the job is paused or deleted. Returns whether it paused."""
        if not self.definition.pause_on_failure or self.paused or self.deleted:
            return False
        if self.resumed_at is not None and dead_at <= self.resumed_at:
            return False
        self._paused(
            by=SYSTEM,
            reason=f"pause_on_failure: execution {execution_id} was dead-lettered",
            execution_id=execution_id,
            via=None,  # no request: the dead letter did it
        )
        return True

    def record_missed_fires(
        self,
        missed: MissedFires,
        *,
        policy: MisfirePolicy | OverlapPolicy | ScheduleRule,
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
            upstream=None,
        )

    def trigger(
        self, *, trigger_key: str, at: datetime, by: str, via: str | None = None
    ) -> Execution:
        """Run the job now, outside its schedule; the same key yields the same execution."""
        self._check_not_deleted("trigger")
        check_actor(by)
        execution = Execution.enqueue(
            job_id=self.id,
            spec=self._run_spec(),
            trigger=Trigger.MANUAL,
            trigger_key=trigger_key,
            ready_at=at,
            by=by,
            via=via,
        )
        self._triggered(execution_id=execution.id, trigger_key=trigger_key, by=by, via=via)
        return execution

    def _run_spec(self) -> ExecutionSpec:
        """What a run of the job runs: a buffer_all job's runs take turns (ADR 80)."""
        spec = self.definition.spec
        if self.definition.overlap is OverlapPolicy.BUFFER_ALL:
            return turn_limits(spec, self.id)
        return spec

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
        via: str | None = None,
        scope: str | None = None,
    ) -> None:
        del by, override, via
        self.definition = definition
        self.next_fire_at = next_fire_at
        if source == CODE:
            self.scope = scope

    @event(Paused)
    def _paused(
        self,
        *,
        by: str,
        reason: str,
        execution_id: uuid.UUID | None = None,
        via: str | None = None,
    ) -> None:
        del by, reason, execution_id, via
        self.paused = True
        self.next_fire_at = None

    @event(Resumed)
    def _resumed(
        self,
        *,
        by: str,
        next_fire_at: datetime | None,
        at: datetime | None = None,
        via: str | None = None,
    ) -> None:
        del by, via
        self.paused = False
        self.next_fire_at = next_fire_at
        self.resumed_at = at

    @event(Deleted)
    def _deleted(
        self, *, by: str, source: str = API, override: bool = False, via: str | None = None
    ) -> None:
        del by, source, override, via
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
        trigger: FireTrigger = FireTrigger.SCHEDULE,
    ) -> None:
        del execution_id, leader_epoch
        # A backfill fires the past: the newest occurrence never moves back.
        self._saw(scheduled_for)
        self.next_fire_at = next_fire_at
        self.fired_count += 1
        if trigger is FireTrigger.BACKFILL and scheduled_for in self.backfill_queue:
            self.backfill_queue = tuple(o for o in self.backfill_queue if o > scheduled_for)
            self.backfill_running = scheduled_for

    def _saw(self, occurrence: datetime) -> None:
        last = self.last_scheduled_for
        self.last_scheduled_for = occurrence if last is None else max(last, occurrence)

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
        upstream: uuid.UUID | None = None,
    ) -> None:
        del first, count, reason, policy
        self._saw(last)
        self.next_fire_at = next_fire_at
        if upstream is not None:
            self.skipped_through[str(upstream)] = last

    @event(Backfilled)
    def _backfilled(
        self,
        *,
        start: datetime,
        end: datetime,
        overlap: BackfillOverlap,
        reason: str,
        by: str,
        occurrences: int,
        already_fired: int,
        excluded: int,
        fired: int,
        skipped: int,
        buffered: tuple[datetime, ...],
        via: str | None = None,
    ) -> None:
        del start, end, reason, by, occurrences, already_fired, excluded, fired, skipped, via
        if overlap is BackfillOverlap.BUFFER_ALL:
            self.backfill_queue = buffered

    @event(Triggered)
    def _triggered(
        self, *, execution_id: uuid.UUID, trigger_key: str, by: str, via: str | None = None
    ) -> None:
        del execution_id, trigger_key, by, via


# The aggregate's metaclass registers the topics of its events when the class is made,
# but not its snapshot's: eventsourcing registers that one when a process first takes a
# snapshot. A process that only reads (an API, a scheduler just started) must resolve it
# too, so it is registered with the class.
register_topic(Job.Snapshot.TOPIC, Job.Snapshot)
