"""Jobs: schedule, update, pause, resume, delete, trigger and backfill; a job now, as
it was at a version or a time, its history, and the jobs it waits for and that wait
for it."""

import random
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from jobledger.declarations import payload_schema
from jobledger.domain.backfill import (
    BackfillPlan,
    check_backfill_window,
    plan_backfill,
    window_occurrences,
)
from jobledger.domain.definitions import JobDefinition
from jobledger.domain.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidDefinitionError,
    InvalidTransitionError,
    NotFoundError,
)
from jobledger.domain.execution import Execution, occurrence_execution_id, trigger_execution_id
from jobledger.domain.job import Job, job_id_for_key
from jobledger.domain.policies import BackfillOverlap
from jobledger.domain.roles import Role
from jobledger.domain.schedules import ManualSchedule, Schedule, validate_schedule
from jobledger.domain.unique import UniqueSpec
from jobledger.persistence.ledger import Ledger
from jobledger.projections.log.streams import load_many
from jobledger.schemas.handlers import HandlerOut
from jobledger.schemas.jobs import BackfillReport
from jobledger.services.actors import Actor
from jobledger.services.caps import NO_CAP, QueueRoom
from jobledger.services.dependency_links import DependencyLinks
from jobledger.services.history import EventOut, history
from jobledger.services.job_keys import job_by_reference
from jobledger.services.unique_runs import NewRun, RunOutcome, run_once


@dataclass(frozen=True)
class HandlerInfo:
    """What a handler says about itself: a line on what it does, and the payload it
    declares (a msgspec Struct the API checks payloads against; None takes any)."""

    description: str = ""
    payload_type: type[msgspec.Struct] | None = None


def _known_ones(name: str, known: Iterable[str]) -> str:
    del name  # the fix is the same for any unknown name
    return f"use one of: {', '.join(sorted(known))}"


class HandlerNames:
    """The handlers a worker can run, and the payloads they declare. A definition naming
    another handler, or a payload its handler's struct refuses, would only fail into the
    dead-letter queue later, so it is refused when it is saved. ``None`` knows them all
    (a tool that saves for workers it cannot see). A new queue past the cap of
    ``queues`` is refused the same way."""

    def __init__(
        self,
        names: Collection[str] | None,
        info: Mapping[str, HandlerInfo] | None = None,
        *,
        queues: QueueRoom = NO_CAP,
        unknown_fix: Callable[[str, Iterable[str]], str] = _known_ones,
    ) -> None:
        self.names = None if names is None else frozenset(names)
        self.info = dict(info or {})
        self.queues = queues
        self._unknown_fix = unknown_fix  # how to fix a definition naming another handler

    def listed(self) -> list[str]:
        """The names, sorted (none when any is allowed)."""
        return sorted(self.names or ())

    def described(self) -> list[HandlerOut]:
        """Every handler with what it does and the JSON schema of its payload."""
        return [_handler_out(name, self.info.get(name, HandlerInfo())) for name in self.listed()]

    def check(
        self, handler: str, payload: Mapping[str, Any] | None = None, queue: str | None = None
    ) -> None:
        """Refuse an unknown handler, or a payload its declared struct refuses (naming
        the payload's field), or a new queue past the cap."""
        if self.names is not None and handler not in self.names:
            raise InvalidDefinitionError(
                "handler",
                f"{handler!r} is not a registered handler",
                self._unknown_fix(handler, self.names),
            )
        kind = self.info.get(handler, HandlerInfo()).payload_type
        if kind is not None and payload is not None:
            _check_payload(handler, kind, payload)
        if queue is not None:
            self.queues.check(queue)


def _handler_out(name: str, info: HandlerInfo) -> HandlerOut:
    schema = payload_schema(info.payload_type) if info.payload_type is not None else None
    return HandlerOut(name=name, description=info.description, payload_schema=schema)


# msgspec's "... - at `$.items[0].sku`", and the field a missing one names.
_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<name>[^`]+)`")


def _check_payload(handler: str, kind: type[msgspec.Struct], payload: Mapping[str, Any]) -> None:
    try:
        msgspec.convert(payload, kind, strict=False)
    except msgspec.ValidationError as error:
        text = str(error)
        at = _AT.search(text)
        problem = text[: at.start()] if at else text
        field = "payload" + (at["path"] if at else "")
        if missing := _MISSING.search(problem):
            field += f".{missing['name']}"
        raise InvalidDefinitionError(
            field,
            f"{problem} (handler {handler} declares its payload as {kind.__name__})",
            f"send the payload {handler} declares; GET /api/v1/handlers shows its schema",
        ) from None


ANY_HANDLER = HandlerNames(None)
# A trigger races fires and other triggers on the job's version: it tries again on the
# job's new version (after a short random pause, so racers spread out) this many times
# before it gives up with a conflict.
_TRIGGER_TRIES = 30
_TRIGGER_PAUSE = 0.005
# How many of a backfill's occurrences its answer lists.
SHOWN_OCCURRENCES = 100
# The longest chain of upstreams followed to find a dependent job's schedule.
MAX_CHAIN = 100


def no_open_runs(_job_id: UUID) -> int:
    return 0


def none_archived(_execution_ids: Sequence[UUID]) -> set[UUID]:
    return set()


def backfill_report(job_id: UUID, plan: BackfillPlan, *, dry_run: bool) -> BackfillReport:
    """What a backfill did (or, with ``dry_run``, would do), from its plan."""
    return BackfillReport(
        job_id=job_id,
        dry_run=dry_run,
        overlap=plan.overlap,
        occurrences=len(plan.occurrences),
        already_fired=len(plan.already_fired),
        excluded=len(plan.excluded),
        to_fire=len(plan.missing),
        fired=len(plan.fire),
        buffered=len(plan.waiting),
        skipped=len(plan.skip),
        missing=list(plan.missing[:SHOWN_OCCURRENCES]),
    )


class Jobs:
    """The job use cases. Each change is one direct save: an operator waits for it, and
    a conflict must reach them at once (the writer batches the hot paths instead)."""

    def __init__(
        self,
        ledger: Ledger,
        handlers: HandlerNames = ANY_HANDLER,
        open_runs: Callable[[UUID], int] = no_open_runs,
        archived: Callable[[Sequence[UUID]], set[UUID]] = none_archived,
    ) -> None:
        self.ledger = ledger
        self.handlers = handlers
        self.links = DependencyLinks(ledger)
        # A job's pending and running executions (the backfill's skip mode asks).
        self.open_runs = open_runs
        # Runs whose history left the log for an archive: fired all the same.
        self.archived = archived

    # ---- commands ---------------------------------------------------------------------

    def schedule(
        self, definition: JobDefinition, *, at: datetime, by: Actor, key: str | None = None
    ) -> Job:
        """Create a job. With a key, repeating the same request returns the same job."""
        by.require(Role.OPERATOR)
        self.handlers.check(definition.spec.handler, definition.spec.payload, definition.spec.queue)

        def scheduled() -> Job:
            return Job.schedule(
                definition, at=at, by=by.name, via=by.via, key=key, limits=self.ledger.limits
            )

        scheduled()  # refuses a bad definition before anything is read
        self.links.check_upstreams(definition)
        try:
            job = self._saved_linked(scheduled)
        except ConflictError:
            existing = self.ledger.get_job(job_id_for_key(key or ""))
            if existing.definition != definition or existing.deleted:
                raise AlreadyExistsError(
                    f"a job with key {key!r} exists with another definition; "
                    "use a new key or update that job"
                ) from None
            return existing
        return job

    def update(
        self,
        job_id: UUID,
        definition: JobDefinition,
        *,
        at: datetime,
        by: Actor,
        override: bool = False,
    ) -> Job:
        """Change a job's definition; one that code manages only with ``override``."""
        by.require(Role.OPERATOR)
        self.handlers.check(definition.spec.handler, definition.spec.payload, definition.spec.queue)
        self.links.check_upstreams(definition)

        def updated() -> Job:
            job = self.ledger.get_job(job_id)
            job.update(
                definition,
                at=at,
                by=by.name,
                via=by.via,
                limits=self.ledger.limits,
                override=override,
            )
            return job

        return self._saved_linked(updated)

    def pause(self, job_id: UUID, *, by: Actor, reason: str = "") -> Job:
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        job.pause(by=by.name, via=by.via, reason=reason)
        return self._saved(job)

    def resume(self, job_id: UUID, *, at: datetime, by: Actor) -> Job:
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        job.resume(at=at, by=by.name, via=by.via)
        return self._saved(job)

    def delete(self, job_id: UUID, *, by: Actor, override: bool = False) -> Job:
        """Delete a job (its history stays); one that code manages only with
        ``override``. Refused while other jobs depend on it (they would wait for runs
        that never come)."""
        by.require(Role.OPERATOR)

        def deleted() -> Job:
            job = self.ledger.get_job(job_id)
            job.delete(by=by.name, via=by.via, override=override)
            return job

        return self._saved_linked(deleted)

    def trigger(self, job_id: UUID, *, key: str, at: datetime, by: Actor) -> Execution:
        """Run a job now. The same key returns the execution of the first request; a
        job changed meanwhile (another trigger, a fire) is read again and triggered on
        its new version."""
        by.require(Role.OPERATOR)
        for _ in range(_TRIGGER_TRIES):
            job = self.ledger.get_job(job_id)
            execution = job.trigger(trigger_key=key, at=at, by=by.name, via=by.via)
            try:
                self.ledger.save_all(job, execution)
            except ConflictError:
                try:
                    return self.ledger.get_execution(trigger_execution_id(job_id, key))
                except NotFoundError:
                    # The clash was the job's version, not this key: again, spread out.
                    time.sleep(random.uniform(0, _TRIGGER_PAUSE))  # noqa: S311 (not a secret)
                    continue
            return execution
        raise ConflictError(f"job {job_id} kept changing while it was triggered; try again")

    def trigger_unique(
        self, job_id: UUID, unique: UniqueSpec, *, key: str, at: datetime, by: Actor
    ) -> RunOutcome:
        """Run a job now unless another run holds the unique key (filled from the job's
        payload); see ``unique_runs.py``."""
        by.require(Role.OPERATOR)
        spec = self.ledger.get_job(job_id).definition.spec

        def trigger() -> NewRun:
            job = self.ledger.get_job(job_id)  # a fresh copy for every try
            return NewRun(job.trigger(trigger_key=key, at=at, by=by.name, via=by.via), (job,))

        return run_once(self.ledger, unique, spec, trigger, at=at, due=at, by=by)

    def _saved(self, job: Job) -> Job:
        self.ledger.save_all(job)
        return job

    def _saved_linked(self, change: Callable[[], Job]) -> Job:
        """The job ``change`` builds, saved with the dependency graph."""
        saved: list[Job] = []

        def built() -> list[Job]:
            saved[:] = [change()]
            return saved

        self.links.save(built)
        return saved[0]

    # ---- dependencies -----------------------------------------------------------------

    def job_id_of(self, reference: str, *, field: str = "job") -> UUID:
        """The job ``reference`` names (a ``depends_on`` entry, a command's argument):
        its id, or the key it was created with over the API or declared with in code."""
        return job_by_reference(self.ledger, reference, field=field)

    def upstreams(self, job_id: UUID) -> list[Job]:
        """The jobs ``job_id`` waits for."""
        return self.links.upstreams(job_id)

    def downstreams(self, job_id: UUID) -> list[Job]:
        """The live jobs that wait for ``job_id``, by name."""
        return self.links.downstreams(job_id)

    # ---- backfill ---------------------------------------------------------------------

    def backfill(
        self,
        job_id: UUID,
        *,
        start: datetime,
        end: datetime,
        overlap: BackfillOverlap = BackfillOverlap.ALLOW,
        limit: int = 1000,
        reason: str = "",
        dry_run: bool = False,
        at: datetime,
        by: Actor,
        admit: Callable[[int], None] | None = None,
    ) -> BackfillReport:
        """Fire the job's occurrences in ``[start, end]`` that never fired (see
        ``domain/backfill.py``); ``dry_run`` only counts. A paused job may be
        backfilled; a second backfill of the same window fires nothing. ``admit`` is
        told how many runs the backfill is about to create, and may refuse (raise)
        before anything is saved."""
        by.require(Role.OPERATOR)
        check_backfill_window(start, end, now=at, limit=limit)
        job = self.ledger.get_job(job_id)
        if job.deleted:
            raise InvalidTransitionError(f"cannot backfill job {job_id}: it was deleted")
        plan = self._backfill_plan(job, start, end, overlap)
        if not dry_run:
            if len(plan.missing) > limit:
                raise InvalidDefinitionError(
                    "max",
                    f"{len(plan.missing)} occurrences would fire, more than max {limit}",
                    "raise max, or backfill a shorter window",
                )
            executions = job.backfill(plan, at=at, by=by.name, via=by.via, reason=reason)
            if admit is not None:
                admit(len(executions))
            self.ledger.save_all(job, *executions)
        return backfill_report(job.id, plan, dry_run=dry_run)

    def _backfill_plan(
        self, job: Job, start: datetime, end: datetime, overlap: BackfillOverlap
    ) -> BackfillPlan:
        schedule = self.occurrence_schedule(job)
        # The occurrence the scheduler fires next, and any after it, are the scheduler's:
        # a backfill that fired one would collide with the scheduler's own fire of it,
        # which would then fail on every tick and never move the job on.
        due = job.next_fire_at
        occurrences = [
            o for o in window_occurrences(schedule, start, end) if due is None or o < due
        ]
        ids = {occurrence_execution_id(job.id, o): o for o in (*occurrences, *job.backfill_queue)}
        runs = load_many(self.ledger, Execution, list(ids))
        archived = self.archived([i for i in ids if i not in runs])
        fired = {o for run_id, o in ids.items() if run_id in runs or run_id in archived}
        running = job.backfill_running
        current = None if running is None else runs.get(occurrence_execution_id(job.id, running))
        return plan_backfill(
            schedule,
            occurrences,
            start=start,
            end=end,
            overlap=overlap,
            fired=fired,
            buffered=tuple(o for o in job.backfill_queue if o not in fired),
            buffer_busy=current is not None and not current.is_terminal,
            open_runs=self.open_runs(job.id) if overlap is BackfillOverlap.SKIP else 0,
        )

    def occurrence_schedule(self, job: Job) -> Schedule:
        """The schedule whose occurrences the job has: its own, or for a job that
        depends on others, the schedule of the first upstream at the chain's root."""
        current = job
        for _ in range(MAX_CHAIN):
            if not current.definition.depends_on:
                break
            current = self.ledger.get_job(current.definition.depends_on[0].job)
        schedule = current.definition.schedule
        if isinstance(schedule, ManualSchedule):
            raise InvalidDefinitionError(
                "schedule",
                f"job {job.id} has no schedule (it runs only when triggered), so it has "
                "no occurrences to backfill",
                "trigger it instead, or give it a schedule",
            )
        return schedule

    # ---- queries ----------------------------------------------------------------------

    def get(self, job_id: UUID, *, version: int | None = None) -> Job:
        """The job now, or as it was at ``version``."""
        return self.ledger.get_job(job_id, version=version)

    def as_of(self, job_id: UUID, at: datetime) -> Job:
        """The job as it was at ``at`` (the last event recorded at or before it)."""
        return self.ledger.job_as_of(job_id, at)

    def history(self, job_id: UUID) -> list[EventOut]:
        return history(self.ledger, Job, job_id)

    def check_schedule(self, schedule: Schedule) -> Schedule:
        """Refuse a schedule a job definition would refuse, naming the field."""
        validate_schedule(schedule, min_interval=self.ledger.limits.min_interval)
        return schedule
