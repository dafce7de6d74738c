"""Jobs: schedule, update, pause, resume, delete, trigger and backfill; a job now, as
it was at a version or a time, its history, and the jobs it waits for and that wait
for it."""

from collections.abc import Callable, Collection
from datetime import datetime
from uuid import UUID

import msgspec

from jobledger.domain.backfill import (
    BackfillPlan,
    check_backfill_window,
    plan_backfill,
    window_occurrences,
)
from jobledger.domain.definitions import JobDefinition
from jobledger.domain.dependencies import CycleError, DependencyGraph
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
from jobledger.domain.schedules import ManualSchedule, Schedule, validate_schedule
from jobledger.persistence.ledger import Ledger
from jobledger.projections.streams import load_many
from jobledger.runtime.accounts import Role
from jobledger.runtime.handlers.registry import unknown_handler_fix
from jobledger.services.actors import Actor
from jobledger.services.history import EventOut, history


class HandlerNames:
    """The handlers a worker can run. A definition naming another would only fail into
    the dead-letter queue later, so it is refused when it is saved. ``None`` knows them
    all (a tool that saves for workers it cannot see)."""

    def __init__(self, names: Collection[str] | None) -> None:
        self.names = None if names is None else frozenset(names)

    def listed(self) -> list[str]:
        """The names, sorted (none when any is allowed)."""
        return sorted(self.names or ())

    def check(self, handler: str) -> None:
        if self.names is not None and handler not in self.names:
            raise InvalidDefinitionError(
                "handler",
                f"{handler!r} is not a registered handler",
                unknown_handler_fix(handler, self.names),
            )


ANY_HANDLER = HandlerNames(None)
# Saves that lost a race for the dependency graph are tried again on the new graph.
GRAPH_RETRIES = 10
# How many of a backfill's occurrences its answer lists.
SHOWN_OCCURRENCES = 100
# The longest chain of upstreams followed to find a dependent job's schedule.
MAX_CHAIN = 100


def no_open_runs(_job_id: UUID) -> int:
    return 0


class BackfillReport(msgspec.Struct, kw_only=True):
    """What a backfill did (or, with ``dry_run``, would do)."""

    job_id: UUID
    dry_run: bool
    overlap: BackfillOverlap
    occurrences: int  # in the window
    already_fired: int  # have an execution (or wait in an earlier buffer)
    excluded: int  # on an excluded date or a holiday: never fired
    to_fire: int  # the rest: what the backfill takes on
    fired: int  # fired now
    buffered: int  # buffer_all: waiting to fire one after another
    skipped: int  # skip: recorded missed, overlapping the one fired
    missing: list[datetime]  # the first of the occurrences to fire, in order

    @classmethod
    def of(cls, job_id: UUID, plan: BackfillPlan, *, dry_run: bool) -> "BackfillReport":
        return cls(
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
    ) -> None:
        self.ledger = ledger
        self.handlers = handlers
        # A job's pending and running executions (the backfill's skip mode asks).
        self.open_runs = open_runs

    # ---- commands ---------------------------------------------------------------------

    def schedule(
        self, definition: JobDefinition, *, at: datetime, by: Actor, key: str | None = None
    ) -> Job:
        """Create a job. With a key, repeating the same request returns the same job."""
        by.require(Role.OPERATOR)
        self.handlers.check(definition.spec.handler)

        # Built again for every try: a failed save has taken the events of the last.
        def scheduled() -> Job:
            return Job.schedule(definition, at=at, by=by.name, key=key, limits=self.ledger.limits)

        scheduled()  # refuses a bad definition before anything is read
        self._check_upstreams(definition)
        try:
            job = self._save_linked(scheduled)
        except ConflictError:
            existing = self.ledger.get_job(job_id_for_key(key or ""))
            if existing.definition != definition or existing.deleted:
                raise AlreadyExistsError(
                    f"a job with key {key!r} exists with another definition; "
                    "use a new key or update that job"
                ) from None
            return existing
        return job

    def update(self, job_id: UUID, definition: JobDefinition, *, at: datetime, by: Actor) -> Job:
        by.require(Role.OPERATOR)
        self.handlers.check(definition.spec.handler)
        self._check_upstreams(definition)

        def updated() -> Job:
            job = self.ledger.get_job(job_id)
            job.update(definition, at=at, by=by.name, limits=self.ledger.limits)
            return job

        return self._save_linked(updated)

    def pause(self, job_id: UUID, *, by: Actor, reason: str = "") -> Job:
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        job.pause(by=by.name, reason=reason)
        return self._saved(job)

    def resume(self, job_id: UUID, *, at: datetime, by: Actor) -> Job:
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        job.resume(at=at, by=by.name)
        return self._saved(job)

    def delete(self, job_id: UUID, *, by: Actor) -> Job:
        """Delete a job; refused while other jobs depend on it (they would wait for
        runs that never come)."""
        by.require(Role.OPERATOR)

        def deleted() -> Job:
            job = self.ledger.get_job(job_id)
            job.delete(by=by.name)
            return job

        return self._save_linked(deleted, unlink=True)

    def trigger(self, job_id: UUID, *, key: str, at: datetime, by: Actor) -> Execution:
        """Run a job now. The same key returns the execution of the first request."""
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        execution = job.trigger(trigger_key=key, at=at, by=by.name)
        try:
            self.ledger.save_all(job, execution)
        except ConflictError:
            return self.ledger.get_execution(trigger_execution_id(job_id, key))
        return execution

    def _saved(self, job: Job) -> Job:
        self.ledger.save_all(job)
        return job

    # ---- dependencies -----------------------------------------------------------------

    def _check_upstreams(self, definition: JobDefinition) -> None:
        for index, dependency in enumerate(definition.depends_on):
            try:
                upstream = self.ledger.get_job(dependency.job)
            except NotFoundError:
                upstream = None
            if upstream is None or upstream.deleted:
                raise InvalidDefinitionError(
                    f"depends_on[{index}].job",
                    f"no job {dependency.job} (by id, or by the key it was created with)",
                    "name an existing job, by its id or its key",
                )

    def _save_linked(self, change: Callable[[], Job], *, unlink: bool = False) -> Job:
        """Save the job ``change`` builds, with the dependency graph when its upstreams
        change: at the graph's version as read, so an edit that raced another is
        checked again on the graph the other one left (and refused if the two close
        a cycle together). A conflict on the job itself reaches the caller."""
        for _ in range(GRAPH_RETRIES):
            job = change()
            graph = self.ledger.dependency_graph()
            read = None if graph is None else graph.version
            linked = self._linked(graph, job, unlink=unlink)
            try:
                self.ledger.save_all(job, *([linked] if linked is not None else []))
            except ConflictError:
                latest = self.ledger.dependency_graph()
                if linked is not None and (None if latest is None else latest.version) != read:
                    continue  # the graph moved on: check again on the new one
                raise
            return job
        raise ConflictError("the dependency graph kept changing; try again")

    def _linked(
        self, graph: DependencyGraph | None, job: Job, *, unlink: bool
    ) -> DependencyGraph | None:
        """The graph with the job's upstreams set, to save with it; None if it stays as
        it was. Refuses a cycle, and deleting a job others depend on."""
        upstreams = [] if unlink else [d.job for d in job.definition.depends_on]
        if graph is None:
            if not upstreams:
                return None
            graph = DependencyGraph()
        if unlink:
            waiting = [j for j in graph.downstreams(job.id) if not self._gone(j)]
            if waiting:
                names = ", ".join(self._name(j) for j in sorted(waiting))
                raise InvalidTransitionError(
                    f"cannot delete job {job.id}: {names} depend on it; "
                    "remove it from their depends_on first"
                )
        try:
            graph.link(job.id, upstreams)
        except CycleError as cycle:
            on_path = {step: self._name(step) for step in cycle.path if step != job.id}
            raise cycle.refusal({**on_path, job.id: job.definition.name}) from None
        return graph if graph.pending_events else None

    def _gone(self, job_id: UUID) -> bool:
        try:
            return self.ledger.get_job(job_id).deleted
        except NotFoundError:
            return True

    def _name(self, job_id: UUID) -> str:
        try:
            return self.ledger.get_job(job_id).definition.name
        except NotFoundError:
            return str(job_id)

    def upstreams(self, job_id: UUID) -> list[Job]:
        """The jobs ``job_id`` waits for."""
        job = self.ledger.get_job(job_id)
        return [self.ledger.get_job(d.job) for d in job.definition.depends_on]

    def downstreams(self, job_id: UUID) -> list[Job]:
        """The jobs that wait for ``job_id``, by name."""
        graph = self.ledger.dependency_graph()
        if graph is None:
            return []
        found = [self.ledger.get_job(j) for j in graph.downstreams(job_id)]
        return sorted((j for j in found if not j.deleted), key=lambda j: j.definition.name)

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
    ) -> BackfillReport:
        """Fire the job's occurrences in ``[start, end]`` that never fired (see
        ``domain/backfill.py``); ``dry_run`` only counts. A paused job may be
        backfilled; a second backfill of the same window fires nothing."""
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
            executions = job.backfill(plan, at=at, by=by.name, reason=reason)
            self.ledger.save_all(job, *executions)
        return BackfillReport.of(job.id, plan, dry_run=dry_run)

    def _backfill_plan(
        self, job: Job, start: datetime, end: datetime, overlap: BackfillOverlap
    ) -> BackfillPlan:
        schedule = self.occurrence_schedule(job)
        occurrences = window_occurrences(schedule, start, end)
        ids = {occurrence_execution_id(job.id, o): o for o in (*occurrences, *job.backfill_queue)}
        runs = load_many(self.ledger, Execution, list(ids))
        fired = {o for run_id, o in ids.items() if run_id in runs}
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
