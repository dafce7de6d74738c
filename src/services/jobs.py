"""Jobs: schedule, update, pause, resume, delete and trigger; a job now, as it was at a
version or a time, and its history."""

from collections.abc import Collection
from datetime import datetime
from uuid import UUID

from jobledger.domain.definitions import JobDefinition
from jobledger.domain.errors import AlreadyExistsError, ConflictError, InvalidDefinitionError
from jobledger.domain.execution import Execution, trigger_execution_id
from jobledger.domain.job import Job, job_id_for_key
from jobledger.domain.schedules import Schedule, validate_schedule
from jobledger.persistence.ledger import Ledger
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


class Jobs:
    """The job use cases. Each change is one direct save: an operator waits for it, and
    a conflict must reach them at once (the writer batches the hot paths instead)."""

    def __init__(self, ledger: Ledger, handlers: HandlerNames = ANY_HANDLER) -> None:
        self.ledger = ledger
        self.handlers = handlers

    # ---- commands ---------------------------------------------------------------------

    def schedule(
        self, definition: JobDefinition, *, at: datetime, by: Actor, key: str | None = None
    ) -> Job:
        """Create a job. With a key, repeating the same request returns the same job."""
        by.require(Role.OPERATOR)
        self.handlers.check(definition.spec.handler)
        job = Job.schedule(definition, at=at, by=by.name, key=key, limits=self.ledger.limits)
        try:
            self.ledger.save_all(job)
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
        job = self.ledger.get_job(job_id)
        job.update(definition, at=at, by=by.name, limits=self.ledger.limits)
        return self._saved(job)

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
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        job.delete(by=by.name)
        return self._saved(job)

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
