"""Jobs: schedule, update, pause, resume, delete and trigger; a job now, as it was at a
version or a time, and its history."""

import random
import re
import time
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from jobledger.declarations import payload_schema
from jobledger.domain.definitions import JobDefinition
from jobledger.domain.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidDefinitionError,
    NotFoundError,
)
from jobledger.domain.execution import Execution, trigger_execution_id
from jobledger.domain.job import Job, job_id_for_key
from jobledger.domain.schedules import Schedule, validate_schedule
from jobledger.persistence.ledger import Ledger
from jobledger.runtime.accounts import Role
from jobledger.runtime.handlers.registry import HandlerInfo, unknown_handler_fix
from jobledger.schemas.handlers import HandlerOut
from jobledger.services.actors import Actor
from jobledger.services.history import EventOut, history


class HandlerNames:
    """The handlers a worker can run, and the payloads they declare. A definition naming
    another handler, or a payload its handler's struct refuses, would only fail into the
    dead-letter queue later, so it is refused when it is saved. ``None`` knows them all
    (a tool that saves for workers it cannot see)."""

    def __init__(
        self, names: Collection[str] | None, info: Mapping[str, HandlerInfo] | None = None
    ) -> None:
        self.names = None if names is None else frozenset(names)
        self.info = dict(info or {})

    def listed(self) -> list[str]:
        """The names, sorted (none when any is allowed)."""
        return sorted(self.names or ())

    def described(self) -> list[HandlerOut]:
        """Every handler with what it does and the JSON schema of its payload."""
        return [_handler_out(name, self.info.get(name, HandlerInfo())) for name in self.listed()]

    def check(self, handler: str, payload: Mapping[str, Any] | None = None) -> None:
        """Refuse an unknown handler, or a payload its declared struct refuses (naming
        the payload's field)."""
        if self.names is not None and handler not in self.names:
            raise InvalidDefinitionError(
                "handler",
                f"{handler!r} is not a registered handler",
                unknown_handler_fix(handler, self.names),
            )
        kind = self.info.get(handler, HandlerInfo()).payload_type
        if kind is not None and payload is not None:
            _check_payload(handler, kind, payload)


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
        self.handlers.check(definition.spec.handler, definition.spec.payload)
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
        self.handlers.check(definition.spec.handler, definition.spec.payload)
        job = self.ledger.get_job(job_id)
        job.update(definition, at=at, by=by.name, limits=self.ledger.limits, override=override)
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

    def delete(self, job_id: UUID, *, by: Actor, override: bool = False) -> Job:
        """Delete a job (its history stays); one that code manages only with ``override``."""
        by.require(Role.OPERATOR)
        job = self.ledger.get_job(job_id)
        job.delete(by=by.name, override=override)
        return self._saved(job)

    def trigger(self, job_id: UUID, *, key: str, at: datetime, by: Actor) -> Execution:
        """Run a job now. The same key returns the execution of the first request; a
        job changed meanwhile (another trigger, a fire) is read again and triggered on
        its new version."""
        by.require(Role.OPERATOR)
        for _ in range(_TRIGGER_TRIES):
            job = self.ledger.get_job(job_id)
            execution = job.trigger(trigger_key=key, at=at, by=by.name)
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
