"""Request and response bodies of the REST API, and their mapping to the domain.

Requests forbid unknown fields, so a typo is an error instead of a silently ignored
setting. Durations are seconds (JSON has no duration type); times are ISO 8601 with
an offset.
"""

from datetime import date, datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

import msgspec

from jobledger.domain.definitions import DEFAULT_PRIORITY, ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import Dependency, WaitFor
from jobledger.domain.job import Job, job_reference
from jobledger.domain.policies import BackfillOverlap, MisfirePolicy, OverlapPolicy, RetryPolicy
from jobledger.domain.schedules import (
    CronSchedule,
    IntervalSchedule,
    ManualSchedule,
    OneShotSchedule,
    Schedule,
    ScheduleRules,
)
from jobledger.domain.workflow import OnFailure, StepSpec, Workflow

# Bounds that keep a number convertible (a duration of 1e300 s is an overflow, not a
# validation message); the domain checks the real limits and names the fix.
Seconds = Annotated[float, msgspec.Meta(ge=0, le=10_000_000)]
SmallInt = Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)]
# PostgreSQL text cannot hold NUL, and no name, reason or filter needs one.
NO_NUL = "^[^\\x00]*$"
Text = Annotated[str, msgspec.Meta(max_length=2000, pattern=NO_NUL)]
Short = Annotated[str, msgspec.Meta(max_length=200, pattern=NO_NUL)]
Tiny = Annotated[str, msgspec.Meta(max_length=64, pattern=NO_NUL)]
AwareTime = Annotated[datetime, msgspec.Meta(tz=True)]
Payload = Annotated[
    dict[str, Any],
    msgspec.Meta(
        description=(
            "a JSON object for the handler: integers within signed 64 bits, no NUL in keys "
            "or strings, keys up to 256 characters, nesting up to 32 levels, at most "
            "JOBLEDGER_MAX_PAYLOAD_BYTES as JSON; a value past a limit is refused with "
            "422 naming its path"
        )
    ),
]
Zone = Annotated[
    str,
    msgspec.Meta(
        max_length=64,
        pattern=NO_NUL,
        description="an IANA region name (Area/Location, Etc/..., or UTC), e.g. Europe/Berlin",
    ),
]


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


def strict_bodies() -> list[type[Strict]]:
    """Every request body type (each refuses unknown fields)."""
    found: list[type[Strict]] = []
    pending = [Strict]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found


class RetryIn(Strict):
    max_retries: SmallInt = 3
    initial_backoff_seconds: Seconds = 1.0
    max_backoff_seconds: Seconds = 300.0
    jitter: bool = True


class RulesIn(Strict, kw_only=True):
    """What every recurring schedule may add: a window, exclusions, jitter."""

    jitter_seconds: Annotated[int, msgspec.Meta(ge=0, le=86_400)] = 0
    start_at: AwareTime | None = None
    end_at: AwareTime | None = None
    exclude_dates: Annotated[list[date], msgspec.Meta(max_length=1000)] = msgspec.field(
        default_factory=list
    )
    calendars: Annotated[list[Tiny], msgspec.Meta(max_length=10)] = msgspec.field(
        default_factory=list
    )


class CronIn(RulesIn, tag="cron", tag_field="kind", kw_only=True):
    cron: Short
    timezone: Zone = "UTC"


class IntervalIn(RulesIn, tag="interval", tag_field="kind", kw_only=True):
    """Every ``every_seconds`` of elapsed time, at epoch multiples plus the offset."""

    every_seconds: Annotated[int, msgspec.Meta(ge=1, le=31_622_400)]
    offset_seconds: Annotated[int, msgspec.Meta(ge=0, le=31_622_400)] = 0
    timezone: Zone = "UTC"


class OnceIn(Strict, tag="once", tag_field="kind"):
    run_at: AwareTime


class ManualIn(Strict, tag="manual", tag_field="kind"):
    pass


ScheduleIn = CronIn | IntervalIn | OnceIn | ManualIn


class ExecutionIn(Strict):
    """What to run: a handler, its payload and how to retry it."""

    handler: Short
    payload: Payload = msgspec.field(default_factory=dict)
    queue: Tiny = "default"
    priority: SmallInt = DEFAULT_PRIORITY
    timeout_seconds: Seconds = 300.0
    retry: RetryIn = msgspec.field(default_factory=RetryIn)


class DependencyIn(Strict):
    """An upstream job (its id, or the key it was created with) and the state its run
    must reach: ``completed``, or ``finished`` (any end)."""

    job: Short
    on: WaitFor = WaitFor.COMPLETED


class JobIn(ExecutionIn, kw_only=True):
    """A job definition: what to run and when."""

    name: Short
    schedule: ScheduleIn = msgspec.field(default_factory=ManualIn)
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    catch_up_cap: SmallInt = 10
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    description: Text = ""
    depends_on: Annotated[list[DependencyIn], msgspec.Meta(max_length=20)] = msgspec.field(
        default_factory=list
    )
    pause_on_failure: bool = False


class JobPatch(Strict):
    """Fields to change; the others keep their values."""

    name: Short | msgspec.UnsetType = msgspec.UNSET
    handler: Short | msgspec.UnsetType = msgspec.UNSET
    schedule: ScheduleIn | msgspec.UnsetType = msgspec.UNSET
    payload: Payload | msgspec.UnsetType = msgspec.UNSET
    queue: Tiny | msgspec.UnsetType = msgspec.UNSET
    priority: SmallInt | msgspec.UnsetType = msgspec.UNSET
    timeout_seconds: Seconds | msgspec.UnsetType = msgspec.UNSET
    retry: RetryIn | msgspec.UnsetType = msgspec.UNSET
    misfire: MisfirePolicy | msgspec.UnsetType = msgspec.UNSET
    catch_up_cap: SmallInt | msgspec.UnsetType = msgspec.UNSET
    overlap: OverlapPolicy | msgspec.UnsetType = msgspec.UNSET
    description: Text | msgspec.UnsetType = msgspec.UNSET
    depends_on: list[DependencyIn] | msgspec.UnsetType = msgspec.UNSET
    pause_on_failure: bool | msgspec.UnsetType = msgspec.UNSET


class ReasonIn(Strict):
    reason: Text = ""


class BulkRequeueIn(Strict):
    """Which dead letters to requeue; empty filters match all of them."""

    queue: Tiny | None = None
    handler: Short | None = None
    job_id: UUID | None = None
    error_contains: Text | None = None
    reason: Text = ""
    dry_run: bool = False


class PreviewIn(Strict):
    schedule: ScheduleIn
    count: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10
    after: AwareTime | None = None


class JobOut(msgspec.Struct, kw_only=True):
    id: UUID
    version: int
    status: str
    next_fire_at: datetime | None
    last_scheduled_for: datetime | None
    fired_count: int
    definition: JobIn
    as_of: datetime | None = None


class Fire(msgspec.Struct):
    """One occurrence: when it runs (``at``, its time plus its jitter) in UTC and in
    the schedule's zone, its nominal time, and whether an exclusion skips it."""

    at: datetime
    local: str
    scheduled_for: datetime | None = None
    excluded: bool = False


class PreviewOut(msgspec.Struct):
    timezone: str
    fires: list[Fire]


# ---- mapping ---------------------------------------------------------------------------


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


def to_dependencies(dependencies: list[DependencyIn]) -> tuple[Dependency, ...]:
    return tuple(Dependency(job=job_reference(d.job), on=d.on) for d in dependencies)


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
    )


def to_definition(body: JobIn) -> JobDefinition:
    return JobDefinition(
        name=body.name,
        spec=to_spec(body),
        schedule=to_schedule(body.schedule),
        misfire=body.misfire,
        catch_up_cap=body.catch_up_cap,
        overlap=body.overlap,
        description=body.description,
        depends_on=to_dependencies(body.depends_on),
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
        schedule=from_schedule(definition.schedule),
        misfire=definition.misfire,
        catch_up_cap=definition.catch_up_cap,
        overlap=definition.overlap,
        description=definition.description,
        depends_on=[DependencyIn(job=str(d.job), on=d.on) for d in definition.depends_on],
        pause_on_failure=definition.pause_on_failure,
    )


def patched(current: JobIn, patch: JobPatch) -> JobIn:
    changes = {
        name: value
        for name in patch.__struct_fields__
        if (value := getattr(patch, name)) is not msgspec.UNSET
    }
    return msgspec.structs.replace(current, **changes)


def job_status(job: Job) -> str:
    if job.deleted:
        return "deleted"
    return "paused" if job.paused else "active"


def job_out(job: Job, *, as_of: datetime | None = None) -> JobOut:
    return JobOut(
        id=job.id,
        version=job.version,
        status=job_status(job),
        next_fire_at=job.next_fire_at,
        last_scheduled_for=job.last_scheduled_for,
        fired_count=job.fired_count,
        definition=from_definition(job.definition),
        as_of=as_of,
    )


# ---- workflows, dependencies and backfill ------------------------------------------------


class StepIn(ExecutionIn, kw_only=True):
    """One step of a workflow: a handler run, named, after the steps it waits for."""

    name: Tiny
    after: Annotated[list[Tiny], msgspec.Meta(max_length=50)] = msgspec.field(default_factory=list)


class WorkflowIn(Strict, kw_only=True):
    """An ad-hoc DAG: steps whose ``after`` name other steps; ``on_failure`` says
    whether a failed step stops the workflow or only what depends on it."""

    name: Short = "workflow"
    steps: Annotated[list[StepIn], msgspec.Meta(min_length=1, max_length=500)]
    on_failure: OnFailure = OnFailure.STOP


class StepOut(msgspec.Struct, kw_only=True):
    name: str
    handler: str
    after: list[str]
    status: str
    execution_id: UUID
    result: dict[str, Any] | None = None
    error: str | None = None


class WorkflowOut(msgspec.Struct, kw_only=True):
    id: UUID
    name: str
    status: str
    on_failure: OnFailure
    version: int
    created_at: datetime
    updated_at: datetime
    steps: list[StepOut]


class BackfillIn(Strict, kw_only=True):
    """Fire the occurrences in ``[start, end]`` that never fired (``max``: refuse if
    more would); ``dry_run`` only counts."""

    start: AwareTime
    end: AwareTime
    overlap: BackfillOverlap = BackfillOverlap.ALLOW
    max: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    reason: Text = ""
    dry_run: bool = False


class JobLink(msgspec.Struct, kw_only=True):
    """An upstream or downstream job: its id, name and status, and what it waits for."""

    id: UUID
    name: str
    status: str
    on: WaitFor


class DependenciesOut(msgspec.Struct, kw_only=True):
    upstreams: list[JobLink]
    downstreams: list[JobLink]


def to_steps(body: WorkflowIn) -> list[StepSpec]:
    return [
        StepSpec(name=step.name, spec=to_spec(step), after=tuple(step.after)) for step in body.steps
    ]


def workflow_out(workflow: Workflow) -> WorkflowOut:
    steps = [
        StepOut(
            name=name,
            handler=spec.spec.handler,
            after=list(spec.after),
            status=str(workflow.states[name]),
            execution_id=workflow.execution_id(name),
            result=workflow.results.get(name),
            error=workflow.errors.get(name),
        )
        for name, spec in workflow.steps.items()
    ]
    return WorkflowOut(
        id=workflow.id,
        name=workflow.name,
        status=str(workflow.status),
        on_failure=workflow.on_failure,
        version=workflow.version,
        created_at=workflow.created_on,
        updated_at=workflow.modified_on,
        steps=steps,
    )
