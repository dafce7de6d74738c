"""Job definitions and execution specs: the value objects a job is made of."""

import re
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from jobledger.domain.dependencies import Dependency, check_dependencies
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.json_values import check_json, check_text
from jobledger.domain.limits import ConcurrencyLimit, RunLimits
from jobledger.domain.names import check_name
from jobledger.domain.policies import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
)
from jobledger.domain.schedules import (
    DEFAULT_MIN_INTERVAL,
    ManualSchedule,
    Schedule,
    validate_schedule,
)

MAX_PAYLOAD_BYTES = 64 * 1024
MIN_TIMEOUT = timedelta(seconds=1)
MAX_TIMEOUT = timedelta(hours=24)
MAX_CATCH_UP_CAP = 1000
MAX_DESCRIPTION_CHARS = 2000
_HANDLER = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
_QUEUE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# The concurrency key a buffer_all job's runs share (one run of the job at a time).
TURN_KEY_PREFIX = "jobledger.turn:"


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds a definition is checked against (from the settings)."""

    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    min_interval: timedelta = DEFAULT_MIN_INTERVAL


DEFAULT_LIMITS = Limits()


class ExecutionSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one execution runs: a snapshot taken when it is enqueued."""

    handler: str
    payload: dict[str, Any] = msgspec.field(default_factory=dict)
    queue: str = "default"
    priority: int = DEFAULT_PRIORITY
    timeout: timedelta = timedelta(minutes=5)
    retry: RetryPolicy = RetryPolicy()
    # Concurrency and rate limits (keys as given; an enqueued run's are resolved).
    limits: RunLimits | None = None
    # A run not leased by then is discarded (``ExecutionExpired``); None: no deadline.
    expires_at: datetime | None = None

    def check(self, limits: Limits = DEFAULT_LIMITS) -> None:
        _check_handler(self.handler)
        check_queue_name(self.queue)
        _check_priority(self.priority)
        _check_timeout(self.timeout)
        if not isinstance(self.payload, dict):
            raise InvalidDefinitionError(
                "payload", f"is a {type(self.payload).__name__}", "send a JSON object"
            )
        check_json(self.payload, "payload", max_bytes=limits.max_payload_bytes)
        self.retry.check()
        if self.limits is not None:
            self.limits.check()
            self.limits.check_payload(self.payload)

    def resolved(self) -> "ExecutionSpec":
        """The spec with its limit keys built from its payload (what a run records)."""
        if self.limits is None:
            return self
        limits = self.limits.resolve(self.payload)
        return self if limits == self.limits else msgspec.structs.replace(self, limits=limits)


class JobDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A job as a user defines it: what to run and when."""

    name: str
    spec: ExecutionSpec
    schedule: Schedule = ManualSchedule()
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    catch_up_cap: int = 10
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    description: str = ""
    # The jobs whose runs release this one's (see domain/dependencies.py).
    depends_on: tuple[Dependency, ...] = ()
    # A dead letter pauses the job (by "system", naming the execution).
    pause_on_failure: bool = False

    def check(self, limits: Limits = DEFAULT_LIMITS, *, job_id: UUID | None = None) -> None:
        check_name(self.name)
        if not 1 <= self.catch_up_cap <= MAX_CATCH_UP_CAP:
            raise InvalidDefinitionError(
                "catch_up_cap",
                f"{self.catch_up_cap} is out of range",
                f"use a number from 1 to {MAX_CATCH_UP_CAP}",
            )
        check_text(self.description, "description", max_chars=MAX_DESCRIPTION_CHARS)
        self.spec.check(limits)
        validate_schedule(self.schedule, min_interval=limits.min_interval)
        check_dependencies(self.depends_on, job_id=job_id)
        _check_turns(self)
        if self.depends_on and not isinstance(self.schedule, ManualSchedule):
            raise InvalidDefinitionError(
                "schedule",
                "a job with depends_on fires when its upstream jobs' runs end, not on a "
                "schedule of its own",
                "use the manual schedule (the upstreams' schedule decides its occurrences)",
            )


def _check_turns(definition: "JobDefinition") -> None:
    """``buffer_all`` makes the job's runs take turns through a concurrency limit of its
    own (see ``turn_limits``): the spec cannot name another."""
    limits = definition.spec.limits
    if definition.overlap is OverlapPolicy.BUFFER_ALL and limits and limits.concurrency:
        raise InvalidDefinitionError(
            "limits.concurrency",
            "a buffer_all job runs one run at a time already",
            "leave limits.concurrency out, or choose another overlap policy",
        )


def turn_limits(spec: ExecutionSpec, job_id: UUID) -> ExecutionSpec:
    """``spec`` for a run of a ``buffer_all`` job: at most one of the job's runs at once,
    the rest waiting in the queue in their order."""
    concurrency = ConcurrencyLimit(key=f"{TURN_KEY_PREFIX}{job_id}", max=1)
    rate = None if spec.limits is None else spec.limits.rate
    return msgspec.structs.replace(spec, limits=RunLimits(concurrency=concurrency, rate=rate))


def _check_handler(handler: str) -> None:
    if not _HANDLER.fullmatch(handler):
        raise InvalidDefinitionError(
            "handler",
            f"{handler!r} is not a handler name",
            "use a dotted lower-case name such as http.webhook or test.echo",
        )


def check_queue_name(queue: str) -> None:
    if not _QUEUE.fullmatch(queue):
        raise InvalidDefinitionError(
            "queue",
            f"{queue!r} is not a queue name",
            "use 1-64 lower-case letters, digits, _ or -",
        )


def _check_priority(priority: int) -> None:
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidDefinitionError(
            "priority",
            f"{priority} is out of range",
            f"use a whole number from {MIN_PRIORITY} (lowest) to {MAX_PRIORITY} (highest)",
        )


def _check_timeout(timeout: timedelta) -> None:
    if not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        raise InvalidDefinitionError(
            "timeout",
            f"{timeout.total_seconds():g} s is out of range",
            "use from 1 second to 24 hours",
        )
