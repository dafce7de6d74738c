"""What one attempt of a handler came to, as the worker reports and records it.

The worker turns what a handler did into a ``Report``: it returned (``Completed``), it
raised, timed out or does not exist here (``Failed``), or its circuit breaker refused to
run it (``Deferred``); or the handler decided by raising one of its decisions: no attempt
can succeed (``FailedPermanently``), run again later without spending an attempt
(``Snoozed``), drop the run (``Dropped``). Recording the report on the execution
settles what it means: the execution's retry budget decides whether a failure is
retried or dead-lettered (the worker reads that answer from the recorded execution, as
it may change on a reload), and a run an operator cancelled while it ran makes the
report moot (``Cancelled``). Consumers match on the types, with ``assert_never``, so
no outcome goes unhandled.
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
class FailedPermanently(Failed):
    """The handler said no attempt can succeed: dead-letter now, with ``error``. A
    ``Failed`` too (counted and logged as one), so match on it before ``Failed``."""

    kind: ClassVar[str] = "fail_permanently"


@dataclass(frozen=True)
class Snoozed:
    """The handler asked to run again ``delay`` from the report, spending no attempt."""

    reason: str
    delay: timedelta
    kind: ClassVar[str] = "snooze"


@dataclass(frozen=True)
class Dropped:
    """The handler discarded its run for ``reason``: it ends, not failed."""

    reason: str
    kind: ClassVar[str] = "discard"


@dataclass(frozen=True)
class Cancelled:
    """An operator cancelled the run while it ran: the report is moot, not stale."""


Report: TypeAlias = Completed | Failed | Deferred | FailedPermanently | Snoozed | Dropped
Outcome: TypeAlias = Report | Cancelled


def decided(decision: object) -> Report | None:
    """The report of a handler's decision (``Snooze``, ``Discard``, ``PermanentError``
    raised); None for any other exception."""
    # Here, not at the top: the outcomes stay importable without the handler side.
    from jobledger.runtime.handlers.base import Discard, PermanentError, Snooze  # noqa: PLC0415

    match decision:
        case Snooze(delay=delay, reason=reason):
            return Snoozed(reason, delay=delay)
        case Discard(reason=reason):
            return Dropped(reason)
        case PermanentError(reason=reason):
            return FailedPermanently(reason)
    return None
