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
from jobledger.projections.read_models import job_index
from jobledger.projections.read_models.job_index import JobIndex
from jobledger.services.executions import Executions
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


def test_pages_of_no_job_event_move_the_stored_position_at_most_once_a_second(
    container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the log moves by events of no job, then the index follows in memory and
    writes its position to the table at most once a POSITION_EVERY; a job event is
    written at once, with the position; a fresh index starts from the stored one."""
    table = SqlJobSchedule(container.database)
    index = JobIndex(container.ledger, table)
    definition = JobDefinition(
        name="indexed", spec=ExecutionSpec(handler="test.echo"), schedule=CronSchedule("* * * * *")
    )
    Jobs(container.ledger).schedule(definition, at=T0, by=actor())
    assert index.catch_up() == 1
    stored = table.position()
    assert stored == index.position() > 0

    monkeypatch.setattr(job_index, "POSITION_EVERY", 3600.0)
    run = ExecutionSpec(handler="test.echo")
    Executions(container.ledger).run(run, key="a", at=T0, by=actor())
    assert index.catch_up() == 0
    assert index.position() > stored
    assert table.position() == stored

    Jobs(container.ledger).schedule(definition, at=T0, by=actor())
    assert index.catch_up() == 1
    assert table.position() == index.position() == container.ledger.recorder.max_notification_id()

    monkeypatch.setattr(job_index, "POSITION_EVERY", 0.0)
    Executions(container.ledger).run(run, key="b", at=T0, by=actor())
    assert index.catch_up() == 0
    assert table.position() == index.position() == container.ledger.recorder.max_notification_id()
    assert JobIndex(container.ledger, table).position() == table.position()
