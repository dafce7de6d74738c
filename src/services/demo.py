"""Demo jobs for trying jobledger out: one of each built-in test handler, created by key
so that seeding again finds them instead of adding copies."""

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import DomainError, NotFoundError
from jobledger.domain.job import job_id_for_key
from jobledger.domain.schedules import CronSchedule, ManualSchedule, OneShotSchedule
from jobledger.services.actors import Actor
from jobledger.services.jobs import Jobs

KEY_PREFIX = "jobledger-demo:"
WELCOME_DELAY = timedelta(seconds=3)

DEMO_JOBS: tuple[tuple[str, JobDefinition], ...] = (
    (
        "echo-every-minute",
        JobDefinition(
            name="demo: echo every minute",
            description="test.echo returns its payload; fires every minute",
            spec=ExecutionSpec(handler="test.echo", payload={"hello": "world"}),
            schedule=CronSchedule("* * * * *"),
        ),
    ),
    (
        "log-every-5-minutes",
        JobDefinition(
            name="demo: log every 5 minutes",
            description="test.log writes its message to the worker's log",
            spec=ExecutionSpec(handler="test.log", payload={"message": "hello from jobledger"}),
            schedule=CronSchedule("*/5 * * * *"),
        ),
    ),
    (
        "delay-hourly",
        JobDefinition(
            name="demo: sleep 5 s every hour",
            description="test.delay sleeps, so a running execution can be watched",
            spec=ExecutionSpec(handler="test.delay", payload={"seconds": 5}),
            schedule=CronSchedule("0 * * * *"),
        ),
    ),
    (
        "echo-manual",
        JobDefinition(
            name="demo: run me by hand",
            description="never fires on its own: trigger it from the dashboard",
            spec=ExecutionSpec(handler="test.echo", payload={"triggered": "by hand"}),
            schedule=ManualSchedule(),
        ),
    ),
)


WELCOME_KEY = "welcome-once"


def welcome_job(at: datetime) -> JobDefinition:
    """A one-shot due a moment after the first seeding, so a new user sees a run."""
    return JobDefinition(
        name="demo: welcome - runs once",
        description="a one-shot job: ran once, a few seconds after the first start",
        spec=ExecutionSpec(handler="test.log", payload={"message": "welcome to jobledger"}),
        schedule=OneShotSchedule(at + WELCOME_DELAY),
    )


class Seeded(enum.StrEnum):
    """What seeding did with one demo job."""

    CREATED = "created"
    FOUND = "found"  # it exists under its key: left as it is
    SKIPPED = "skipped"  # the settings refuse it (``reason`` says why)


@dataclass(frozen=True)
class SeedResult:
    key: str
    name: str
    job_id: uuid.UUID
    outcome: Seeded
    reason: str = ""


def demo_job_ids() -> list[uuid.UUID]:
    """Every demo job's id; the one-shot welcome job is the last."""
    keys = [key for key, _ in DEMO_JOBS] + [WELCOME_KEY]
    return [job_id_for_key(KEY_PREFIX + key) for key in keys]


def seed_demo_jobs(jobs: Jobs, *, at: datetime, by: Actor) -> list[SeedResult]:
    """Create every demo job that does not exist yet. A job that exists under its key
    is left alone, even when it was edited or deleted since: seeding never undoes what
    a user did. One the settings refuse (e.g. a larger minimum interval) is skipped."""
    demo = (*DEMO_JOBS, (WELCOME_KEY, welcome_job(at)))
    return [_seed(jobs, key, definition, at=at, by=by) for key, definition in demo]


def _seed(
    jobs: Jobs, key: str, definition: JobDefinition, *, at: datetime, by: Actor
) -> SeedResult:
    full_key = KEY_PREFIX + key
    job_id = job_id_for_key(full_key)
    try:
        jobs.get(job_id)
    except NotFoundError:
        pass
    else:
        return SeedResult(key, definition.name, job_id, Seeded.FOUND)
    try:
        job = jobs.schedule(definition, at=at, by=by, key=full_key)
    except DomainError as error:
        return SeedResult(key, definition.name, job_id, Seeded.SKIPPED, str(error))
    return SeedResult(key, definition.name, job.id, Seeded.CREATED)
