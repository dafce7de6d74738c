"""Job definitions between the API's bodies (``jobledger.schemas``) and the domain's
value objects: the API, the dashboard and ``jobledger apply`` map them the same way."""

from datetime import timedelta

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.schedules import CronSchedule, ManualSchedule, OneShotSchedule, Schedule
from jobledger.schemas.jobs import CronIn, ExecutionIn, JobIn, ManualIn, OnceIn, RetryIn, ScheduleIn


def to_schedule(schedule: ScheduleIn) -> Schedule:
    match schedule:
        case CronIn():
            return CronSchedule(schedule.cron, schedule.timezone)
        case OnceIn():
            return OneShotSchedule(schedule.run_at)
        case _:
            return ManualSchedule()


def from_schedule(schedule: Schedule) -> ScheduleIn:
    match schedule:
        case CronSchedule():
            return CronIn(cron=schedule.expression, timezone=schedule.timezone)
        case OneShotSchedule():
            return OnceIn(run_at=schedule.run_at)
        case _:
            return ManualIn()


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
    )
