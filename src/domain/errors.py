"""Domain errors: one hierarchy, each with a message that names the problem and the fix."""

from uuid import UUID


class DomainError(Exception):
    """The request breaks a rule of the job ledger."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class InvalidDefinitionError(DomainError):
    """The job definition is not valid."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem}; {fix}")


class InvalidTransitionError(DomainError):
    """The change is not allowed from the current state."""


class StaleLeaseError(DomainError):
    """The report names a lease that is no longer current, so it was not applied."""


class JobNotActiveError(DomainError):
    """The job is paused or deleted, so it cannot fire."""


class ManagedJobError(InvalidTransitionError):
    """Code manages this job: change it in code, or by hand with an explicit override."""


class AlreadyExistsError(DomainError):
    """An aggregate with that id is already in the log."""


class NotFoundError(DomainError):
    """Nothing with that id is in the log."""


class ConflictError(DomainError):
    """Someone else changed it first; load it again and retry."""


class UndecodableEventError(DomainError):
    """A stored event of the aggregate no longer decodes, so it cannot be rebuilt."""

    def __init__(
        self, aggregate_id: UUID, version: int, topic: str, error: str, position: int | None
    ) -> None:
        self.aggregate_id = aggregate_id
        self.version = version
        self.topic = topic
        self.error = error
        self.position = position
        where = f"log position {position}, " if position is not None else ""
        super().__init__(
            f"{aggregate_id} cannot be rebuilt: its event v{version} ({where}{topic}) "
            f"cannot be decoded ({error}); the followers quarantine such events: see "
            "`jobledger projections quarantine list`, and its history for the event"
        )

    def at(self, position: int | None) -> "UndecodableEventError":
        """The same error, naming the event's log position."""
        return UndecodableEventError(
            self.aggregate_id, self.version, self.topic, self.error, position
        )
