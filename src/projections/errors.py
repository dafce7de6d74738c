"""Projection errors."""


class ProjectionError(Exception):
    """A projection of the event log could not be brought up to date."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class QueueLostError(ProjectionError):
    """The queue store lost its data (restart without persistence, flush, failover);
    it must be rebuilt from the log."""


class ContendedError(ProjectionError):
    """Other writers kept changing what a follower writes; it tries the page again
    later (contention is about the store's traffic, not about the event)."""
