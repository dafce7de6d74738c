"""Job definitions between the API's bodies (``jobledger.schemas``) and the domain's
value objects: the API, the dashboard and ``jobledger apply`` map them the same way."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import Dependency
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.instants import check_instant
from jobledger.domain.job import job_reference
from jobledger.domain.limits import ConcurrencyLimit, RateLimit, RunLimits
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import (
    CronSchedule,
    IntervalSchedule,
    ManualSchedule,
    OneShotSchedule,
    Schedule,
    ScheduleRules,
)
from jobledger.domain.unique import OnConflict, UniqueSpec
from jobledger.domain.workflow import StepSpec
from jobledger.schemas.executions import RunIn, UniqueIn
from jobledger.schemas.jobs import (
    ConcurrencyIn,
    CronIn,
    DependencyIn,
    ExecutionIn,
    IntervalIn,
    JobIn,
    LimitsIn,
    ManualIn,
    OnceIn,
    RateIn,
    RetryIn,
    RulesIn,
    ScheduleIn,
)
from jobledger.schemas.workflows import WorkflowIn

# Finds the job a ``depends_on`` entry names (its id, or a key); the use cases give one
# that looks keys up in the log (``Jobs.upstream_id``).
UpstreamLookup = Callable[[str], UUID]


def to_schedule(schedule: ScheduleIn) -> Schedule:
    match schedule:
        case CronIn():
            return CronSchedule(schedule.cron, schedule.timezone, **_rules(schedule))
        case IntervalIn():
            return IntervalSchedule(
                every_seconds=schedule.every_seconds,
                offset_seconds=schedule.offset_seconds,
                timezone=schedule.timezone,
                **_rules(schedule),
            )
        case OnceIn():
            return OneShotSchedule(schedule.run_at)
        case _:
            return ManualSchedule()


_RULES = ("jitter_seconds", "start_at", "end_at", "exclude_dates", "calendars")


def _rules(rules: RulesIn | ScheduleRules, sequence: type[Any] = tuple) -> dict[str, Any]:
    """The rule fields of one side, for the other (lists in the API, tuples within)."""
    fields = {name: getattr(rules, name) for name in _RULES}
    return fields | {name: sequence(fields[name]) for name in ("exclude_dates", "calendars")}


def from_schedule(schedule: Schedule) -> ScheduleIn:
    match schedule:
        case CronSchedule():
            return CronIn(
                cron=schedule.expression, timezone=schedule.timezone, **_rules(schedule, list)
            )
        case IntervalSchedule():
            return IntervalIn(
                every_seconds=schedule.every_seconds,
                offset_seconds=schedule.offset_seconds,
                timezone=schedule.timezone,
                **_rules(schedule, list),
            )
        case OneShotSchedule():
            return OnceIn(run_at=schedule.run_at)
        case _:
            return ManualIn()


def to_dependencies(
    dependencies: list[DependencyIn], upstream: UpstreamLookup = job_reference
) -> tuple[Dependency, ...]:
    found = []
    for index, dependency in enumerate(dependencies):
        try:
            job_id = upstream(dependency.job)
        except InvalidDefinitionError as error:
            field = f"depends_on[{index}].job"
            raise InvalidDefinitionError(field, error.problem, error.fix) from None
        found.append(Dependency(job=job_id, on=dependency.on))
    return tuple(found)


def to_ready_at(body: RunIn, now: datetime) -> datetime:
    """When an ad-hoc run is due: now, at ``run_at``, or ``delay_seconds`` from now.
    Every way a run comes in (one run, a batch, an outbox row) asks this, so each
    refuses the same times."""
    if body.run_at is not None and body.delay_seconds is not None:
        raise InvalidDefinitionError(
            "delay_seconds",
            "given with run_at: give one of them, not both",
            "drop delay_seconds to run at run_at, or run_at to run after the delay",
        )
    if body.run_at is not None:
        check_instant("run_at", body.run_at)
        return body.run_at
    return check_instant("delay_seconds", now + timedelta(seconds=body.delay_seconds or 0))


def to_unique(body: UniqueIn) -> UniqueSpec:
    return UniqueSpec(
        key=body.key,
        period=timedelta(seconds=body.period_seconds),
        states=tuple(body.states),
        on_conflict=OnConflict(body.on_conflict),
    )


def to_limits(body: LimitsIn | None) -> RunLimits | None:
    if body is None:
        return None
    concurrency, rate = body.concurrency, body.rate
    return RunLimits(
        concurrency=None
        if concurrency is None
        else ConcurrencyLimit(key=concurrency.key, max=concurrency.max),
        rate=None
        if rate is None
        else RateLimit(
            key=rate.key,
            limit=rate.limit,
            per=None if rate.per_seconds is None else timedelta(seconds=rate.per_seconds),
        ),
    )


def from_limits(limits: RunLimits | None) -> LimitsIn | None:
    if limits is None:
        return None
    concurrency, rate = limits.concurrency, limits.rate
    return LimitsIn(
        concurrency=None
        if concurrency is None
        else ConcurrencyIn(key=concurrency.key, max=concurrency.max),
        rate=None
        if rate is None
        else RateIn(
            key=rate.key,
            limit=rate.limit,
            per_seconds=None if rate.per is None else rate.per.total_seconds(),
        ),
    )


def to_spec(body: ExecutionIn) -> ExecutionSpec:
    retry = body.retry
    return ExecutionSpec(
        handler=body.handler,
        payload=body.payload,
        queue=body.queue,
        priority=body.priority,
        timeout=timedelta(seconds=body.timeout_seconds),
        retry=RetryPolicy(
            max_retries=retry.max_retries,
            initial_backoff=timedelta(seconds=retry.initial_backoff_seconds),
            max_backoff=timedelta(seconds=retry.max_backoff_seconds),
            jitter=retry.jitter,
        ),
        limits=to_limits(body.limits),
    )


def to_run_spec(body: RunIn) -> ExecutionSpec:
    """An ad-hoc run's spec: ``to_spec`` and the run's own start-by deadline."""
    spec = to_spec(body)
    if body.expires_at is None:
        return spec
    return msgspec.structs.replace(spec, expires_at=body.expires_at)


def to_definition(body: JobIn, upstream: UpstreamLookup = job_reference) -> JobDefinition:
    """The definition ``body`` gives; ``upstream`` finds the jobs its ``depends_on``
    names (without the log: an id, or the key of a job created over the API)."""
    return JobDefinition(
        name=body.name,
        spec=to_spec(body),
        schedule=to_schedule(body.schedule),
        misfire=body.misfire,
        catch_up_cap=body.catch_up_cap,
        overlap=body.overlap,
        description=body.description,
        depends_on=to_dependencies(body.depends_on, upstream),
        pause_on_failure=body.pause_on_failure,
    )


def from_definition(definition: JobDefinition) -> JobIn:
    spec, retry = definition.spec, definition.spec.retry
    return JobIn(
        name=definition.name,
        handler=spec.handler,
        payload=spec.payload,
        queue=spec.queue,
        priority=spec.priority,
        timeout_seconds=spec.timeout.total_seconds(),
        retry=RetryIn(
            max_retries=retry.max_retries,
            initial_backoff_seconds=retry.initial_backoff.total_seconds(),
            max_backoff_seconds=retry.max_backoff.total_seconds(),
            jitter=retry.jitter,
        ),
        limits=from_limits(spec.limits),
        schedule=from_schedule(definition.schedule),
        misfire=definition.misfire,
        catch_up_cap=definition.catch_up_cap,
        overlap=definition.overlap,
        description=definition.description,
        depends_on=[DependencyIn(job=str(d.job), on=d.on) for d in definition.depends_on],
        pause_on_failure=definition.pause_on_failure,
    )


def to_steps(body: WorkflowIn) -> list[StepSpec]:
    return [
        StepSpec(name=step.name, spec=to_spec(step), after=tuple(step.after)) for step in body.steps
    ]
