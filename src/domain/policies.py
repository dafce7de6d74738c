"""Retry, misfire and overlap policies, the backoff rule, the priority range, and the
choices of dependencies, backfills and workflows."""

import enum
from datetime import timedelta

import msgspec

from jobledger.domain.errors import InvalidDefinitionError

MAX_RETRIES_LIMIT = 100
MAX_BACKOFF_LIMIT = timedelta(days=7)
# The longest a handler may snooze a run (as long as the longest back-off).
MAX_SNOOZE = MAX_BACKOFF_LIMIT
# Higher runs first; the API's bodies take the default from here too.
MIN_PRIORITY = 0
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 5


class MisfirePolicy(enum.StrEnum):
    """What to do with occurrences missed while no scheduler was running."""

    SKIP = "skip"
    FIRE_ONCE = "fire_once"
    FIRE_ALL = "fire_all"


class OverlapPolicy(enum.StrEnum):
    """What to do when an occurrence is due while an earlier run is still open."""

    ALLOW = "allow"
    SKIP_IF_RUNNING = "skip_if_running"
    QUEUE_ONE = "queue_one"
    # Every fire runs, one run of the job at a time, in firing order (ADR 80).
    BUFFER_ALL = "buffer_all"
    # A fire cancels the job's open runs and runs instead (ADR 80).
    CANCEL_OTHER = "cancel_other"


class ScheduleRule(enum.StrEnum):
    """A rule of the job itself (not a policy it chose) that decided a missed occurrence."""

    EXCLUSIONS = "exclusions"  # the schedule's exclude_dates or calendars
    DEPENDENCIES = "depends_on"  # an upstream run failed, or never happened


class BackfillOverlap(enum.StrEnum):
    """How a backfill's runs overlap one another and the job's open runs."""

    ALLOW = "allow"  # fire every missing occurrence at once
    BUFFER_ALL = "buffer_all"  # one at a time, in order: each after the one before ended
    SKIP = "skip"  # fire one if no run of the job is open; the rest overlap and are missed


class WaitFor(enum.StrEnum):
    """The state of an upstream run that releases its downstream (``depends_on``)."""

    COMPLETED = "completed"
    FINISHED = "finished"


class OnFailure(enum.StrEnum):
    """What a failed step of a workflow does: stop the workflow, or only what runs
    after it."""

    STOP = "stop"
    CONTINUE = "continue"


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How often and how fast a failed execution is tried again.

    An execution gets at most ``max_retries + 1`` attempts per budget.
    """

    max_retries: int = 3
    initial_backoff: timedelta = timedelta(seconds=1)
    max_backoff: timedelta = timedelta(minutes=5)
    jitter: bool = True

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1

    def check(self) -> None:
        if not 0 <= self.max_retries <= MAX_RETRIES_LIMIT:
            raise InvalidDefinitionError(
                "retry.max_retries",
                f"{self.max_retries} is out of range",
                f"use a whole number from 0 to {MAX_RETRIES_LIMIT}",
            )
        if self.initial_backoff <= timedelta(0):
            raise InvalidDefinitionError(
                "retry.initial_backoff",
                "must be positive",
                "use a delay of at least one millisecond",
            )
        if not self.initial_backoff <= self.max_backoff <= MAX_BACKOFF_LIMIT:
            raise InvalidDefinitionError(
                "retry.max_backoff",
                f"{self.max_backoff} is below initial_backoff or above {MAX_BACKOFF_LIMIT}",
                "use a value between initial_backoff and 7 days",
            )

    def backoff(self, attempt: int, rand: float = 1.0) -> timedelta:
        """The delay before the attempt after ``attempt`` (1-based).

        ``min(initial * 2**(attempt-1), max)``; with jitter the delay is scaled by
        ``rand`` in [0, 1] (full jitter), so callers pass the random draw in.
        """
        if attempt < 1:
            msg = f"attempt must be 1 or more, got {attempt}"
            raise ValueError(msg)
        # Cap the exponent first: 2**attempt for a large attempt overflows timedelta.
        exponent = min(attempt - 1, 62)
        ceiling = self.max_backoff.total_seconds()
        delay = min(self.initial_backoff.total_seconds() * 2**exponent, ceiling)
        if self.jitter:
            delay *= min(max(rand, 0.0), 1.0)
        return timedelta(seconds=delay)


def check_snooze(delay: timedelta) -> None:
    """A handler's snooze is at least nothing and at most ``MAX_SNOOZE``."""
    if not timedelta(0) <= delay <= MAX_SNOOZE:
        raise InvalidDefinitionError(
            "seconds",
            f"a snooze of {delay.total_seconds():g} s is out of range",
            f"snooze for 0 to {MAX_SNOOZE.total_seconds():g} seconds",
        )
