"""The job schedule index on both stores: each job's next fire, folded from its events."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from tests.conftest import actor

from jobledger.adapters.sql.job_schedule import SqlJobSchedule
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.settings import Settings
from jobledger.projections.read_models.job_index import JobIndex
from jobledger.services.jobs import Jobs

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def container(store_settings: Settings) -> Iterator[Container]:
    with bootstrap(store_settings) as built:
        yield built


def test_a_page_with_many_events_of_a_job_keeps_the_newest(container: Container) -> None:
    """If one page of the log holds a job's creation, its fires and a change of its
    schedule, then the index holds the next fire the newest of them set, and a paused
    job is due never."""
    jobs = Jobs(container.ledger)
    definition = JobDefinition(
        name="indexed", spec=ExecutionSpec(handler="test.echo"), schedule=CronSchedule("* * * * *")
    )
    job = jobs.schedule(definition, at=T0, by=actor())
    paused = jobs.schedule(definition, at=T0, by=actor())
    loaded = container.ledger.get_job(job.id)
    for minute in (1, 2):
        at = T0 + timedelta(minutes=minute)
        container.ledger.save_all(loaded, loaded.fire(scheduled_for=at, leader_epoch=1, at=at))
    hourly = JobDefinition(
        name="indexed", spec=ExecutionSpec(handler="test.echo"), schedule=CronSchedule("0 * * * *")
    )
    jobs.update(job.id, hourly, at=T0 + timedelta(minutes=3), by=actor())
    jobs.pause(paused.id, by=actor())
    index = JobIndex(container.ledger, SqlJobSchedule(container.database))
    assert index.catch_up() == 6
    assert index.due(T0 + timedelta(minutes=59), limit=10) == []
    assert index.due(T0 + timedelta(hours=1), limit=10) == [job.id]
    assert index.next_due() == T0 + timedelta(hours=1)
