"""Errors of the use cases that are not a domain rule: each names the problem and,
where there is one, the field and the fix."""


class ServiceError(Exception):
    """The request cannot be carried out as asked."""

    def __init__(
        self, message: str | None = None, *, field: str | None = None, fix: str | None = None
    ) -> None:
        self.message = message or self.__doc__ or ""
        self.field = field
        self.fix = fix
        super().__init__(self.message)


class NotPermittedError(ServiceError):
    """The caller's role does not include this right."""


class NotYetVisibleError(ServiceError):
    """It is in the log, but the read models have not caught up with it yet."""


class KeyReusedError(ServiceError):
    """This idempotency key was already used for a different request."""


class NotDeadLetteredError(ServiceError):
    """The execution is not dead-lettered (any more)."""


class AlreadyRunningError(ServiceError):
    """The same long operation is already running."""


class InvalidCursorError(ServiceError):
    """The cursor is none that a page of this list handed out."""


class InvalidRequestError(ServiceError):
    """The request's arguments contradict each other."""


class StoresUnavailableError(ServiceError):
    """A store the operation needs cannot be reached now."""


class ProjectionBehindError(StoresUnavailableError):
    """A projection the operation reads has not caught up with the log yet."""
