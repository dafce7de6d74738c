"""What one attempt of a handler came to, as the worker reports and records it.

The worker turns what a handler did into a ``Report``: it returned (``Completed``), it
raised, timed out or does not exist here (``Failed``), or its circuit breaker refused to
run it (``Deferred``). Recording the report on the execution settles what it means: the
execution's retry budget decides whether a failure is retried or dead-lettered (the
worker reads that answer from the recorded execution, as it may change on a reload),
and a run an operator cancelled while it ran makes the report moot (``Cancelled``).
Consumers match on the types, with ``assert_never``, so no outcome goes unhandled.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeAlias

# Stored and logged alike: a handler's error may carry a whole response body.
MAX_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class Completed:
    """The handler returned ``result`` (its summary) after running for ``duration``."""

    result: dict[str, Any]
    duration: timedelta
    kind: ClassVar[str] = "complete"


@dataclass(frozen=True)
class Failed:
    """The attempt failed with ``error``, cut to ``MAX_ERROR_LENGTH`` characters."""

    error: str
    kind: ClassVar[str] = "fail"

    def __post_init__(self) -> None:
        if len(self.error) > MAX_ERROR_LENGTH:
            # A frozen dataclass sets its fields through object.__setattr__ too.
            object.__setattr__(self, "error", self.error[:MAX_ERROR_LENGTH])


@dataclass(frozen=True)
class Deferred:
    """The run is put off until ``ready_at`` for ``reason``, spending no attempt."""

    reason: str
    ready_at: datetime
    kind: ClassVar[str] = "defer"


@dataclass(frozen=True)
class Cancelled:
    """An operator cancelled the run while it ran: the report is moot, not stale."""


Report: TypeAlias = Completed | Failed | Deferred
Outcome: TypeAlias = Completed | Failed | Deferred | Cancelled
