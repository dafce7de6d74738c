"""The use cases on the embedded store: each is the one home of its rule, whoever calls
it (the API, the dashboard, the CLI)."""

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.integration.test_dead_letters import dead

from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap, build_services
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.job import Job
from jobledger.domain.roles import Role
from jobledger.domain.schedules import CronSchedule
from jobledger.domain.topics import event_topics
from jobledger.infra.settings import load_settings
from jobledger.services.actors import Actor
from jobledger.services.application import Services
from jobledger.services.dead_letters import DeadLetterFilter
from jobledger.services.errors import (
    AlreadyRunningError,
    KeyReusedError,
    NotDeadLetteredError,
    NotPermittedError,
    NotYetVisibleError,
)
from jobledger.services.jobs import Jobs

if TYPE_CHECKING:
    from jobledger.infra.settings import Settings

AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ALICE = Actor("alice", Role.OPERATOR)
ADMIN = Actor("root", Role.ADMIN)
DEFINITION = JobDefinition(
    name="hourly",
    spec=ExecutionSpec(handler="test.echo"),
    schedule=CronSchedule("0 * * * *"),
)


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    settings = load_settings({}, data_dir=str(tmp_path), test_handlers="true")
    migrate(settings, progress=lambda _: None)
    with bootstrap(settings) as built:
        yield built


@pytest.fixture
def services(container: Container) -> Services:
    return build_services(container)


def test_a_caller_without_the_role_is_refused_before_anything_is_written(
    container: Container, services: Services
) -> None:
    """If a viewer asks a use case for a change, then it is refused naming the role it
    needs, and the log has not moved."""
    viewer = Actor("vic", Role.VIEWER)
    head = container.head()
    with pytest.raises(NotPermittedError, match="operator"):
        services.jobs.schedule(DEFINITION, at=AT, by=viewer)
    with pytest.raises(NotPermittedError, match="admin"):
        services.admin.quarantined(by=ALICE)
    assert container.head() == head


def test_a_definition_naming_an_unknown_handler_is_refused_with_a_fix(
    services: Services,
) -> None:
    """If a job or a run names a handler no worker has, then saving it is refused on the
    handler field, with the names that exist."""
    wrong = ExecutionSpec(handler="test.ech")
    with pytest.raises(InvalidDefinitionError) as raised:
        services.executions.run(wrong, key="k", at=AT, by=ALICE)
    assert raised.value.field == "handler"
    assert "test.echo" in raised.value.fix


def test_a_key_names_one_run_and_refuses_another(services: Services) -> None:
    """If a run is asked for twice under one key, then both get the same execution; a
    different run under that key is refused naming the key."""
    spec = ExecutionSpec(handler="test.echo", payload={"n": 1})
    first = services.executions.run(spec, key="once", at=AT, by=ALICE)
    again = services.executions.run(spec, key="once", at=AT + timedelta(1), by=ALICE)
    assert first.id == again.id
    with pytest.raises(KeyReusedError) as raised:
        services.executions.run(
            ExecutionSpec(handler="test.echo", payload={"n": 2}), key="once", at=AT, by=ALICE
        )
    assert raised.value.field == "Idempotency-Key"


def test_a_trigger_key_returns_the_first_run(services: Services) -> None:
    """If a job is triggered twice with one key, then one execution exists for it."""
    job = services.jobs.schedule(DEFINITION, at=AT, by=ALICE, key="reports")
    one = services.jobs.trigger(job.id, key="by-hand", at=AT, by=ALICE)
    two = services.jobs.trigger(job.id, key="by-hand", at=AT, by=ALICE)
    assert one.id == two.id
    assert services.jobs.get(job.id).version == 2  # scheduled, triggered once


def test_dead_letters_are_listed_and_requeued_through_the_read_models(
    container: Container, services: Services
) -> None:
    """If runs died, then the read models list them for any caller; requeueing one that
    is not dead-lettered is refused, and requeueing all gives each a new budget."""
    died = [dead(container, "test.fail", f"boom {n}") for n in range(3)]
    services.admin.catch_up_read_models()
    ids = services.dead_letters.matching(DeadLetterFilter(error_contains="boom"))
    assert set(ids) == {e.id for e in died}
    report = services.dead_letters.requeue(ids, by=ALICE, reason="fixed", at=AT)
    assert (report.matched, report.changed, report.refused) == (3, 3, 0)
    with pytest.raises(NotDeadLetteredError):
        services.dead_letters.requeue_one(died[0].id, by=ALICE, reason="again", at=AT)
    shown = services.dead_letters.show(died[0].id)
    assert [e["event"] for e in shown][-1] == "Requeued"


def test_a_background_rebuild_reports_its_end_and_refuses_a_second(
    services: Services,
) -> None:
    """If a queue rebuild runs in the background, then it ends done at the clock's time;
    while one is running, asking for another is refused."""
    status = services.admin.start_queue_rebuild(full=True, by=ADMIN, clock=lambda: AT)
    deadline = time.monotonic() + 10
    while status.state == "running" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert status.state == "done", status.message
    assert status.finished_at == AT
    status.state = "running"  # as while a rebuild of a long log is still going
    with pytest.raises(AlreadyRunningError):
        services.admin.start_queue_rebuild(full=True, by=ADMIN, clock=lambda: AT)


def test_the_topics_followers_read_are_every_recorded_event_type() -> None:
    """If the aggregates' event classes are read, then their topics are every event
    they record: not the placeholder Created, not the Event base."""
    assert "jobledger:JobFired" in event_topics(Job)
    assert "jobledger:JobCreated" not in event_topics(Job)
    executions = event_topics(Execution)
    assert len(executions) == 18
    assert "jobledger:ExecutionEnqueued" in executions
    assert "jobledger:ExecutionSnoozed" in executions
    assert "jobledger:ExecutionExpired" in executions
    assert "jobledger:ExecutionProgressed" in executions
    assert "jobledger:ExecutionThrottled" in executions
    assert "jobledger:ExecutionBroughtForward" in executions
    assert "jobledger:ExecutionCreated" not in executions


def test_racing_triggers_with_their_own_keys_each_get_a_run(store_settings: "Settings") -> None:
    """If many triggers of one job with keys of their own race each other, then every
    one of them gets its own run (none is lost to the job's version clash), and the job
    records one trigger per key."""
    with bootstrap(store_settings) as container:
        jobs = Jobs(container.ledger)
        job = jobs.schedule(DEFINITION, at=AT, by=ALICE, key="raced")
        keys = [f"by-hand-{n}" for n in range(8)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            runs = list(pool.map(lambda k: jobs.trigger(job.id, key=k, at=AT, by=ALICE), keys))
        assert len({run.id for run in runs}) == len(keys)
        assert jobs.get(job.id).version == 1 + len(keys)


def test_a_cancel_that_loses_the_version_to_a_lease_cancels_the_leased_run(
    container: Container, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a worker saves its lease between a cancel's read of the run and its save, then
    the cancel reads the run again and cancels it as running, instead of answering a
    conflict."""
    spec = ExecutionSpec(handler="test.echo")
    run = services.executions.run(spec, key="race", at=AT, by=ALICE)
    ledger = container.ledger
    stale = ledger.get_execution(run.id)
    leased = ledger.get_execution(run.id)
    leased.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=AT + timedelta(minutes=1))
    ledger.save_all(leased)
    reads = [stale]
    fresh = ledger.get_execution
    monkeypatch.setattr(ledger, "get_execution", lambda i: reads.pop() if reads else fresh(i))
    cancelled = services.executions.cancel(run.id, by=ALICE, reason="stop")
    assert cancelled.status is ExecutionStatus.CANCELLED
    kinds = [type(e).__name__ for e in ledger.history(run.id)]
    assert kinds == ["Enqueued", "Leased", "Cancelled"]


def test_a_wait_right_after_a_requeue_does_not_answer_with_the_old_dead_letter(
    container: Container, services: Services
) -> None:
    """If a dead letter is requeued and a waiter asks before the read models show the
    requeue, then the wait does not answer with the old dead letter: it says the run is
    not visible yet when its time runs out, and once the read models caught up it shows
    the run pending again."""
    died = dead(container, "test.fail", "boom")
    services.admin.catch_up_read_models()
    waits = services.waits
    assert asyncio.run(waits.detail(died.id, wait=1)).execution.status == "dead_lettered"
    services.dead_letters.requeue_one(died.id, by=ALICE, reason="fixed", at=AT)
    started = time.monotonic()
    with pytest.raises(NotYetVisibleError):
        asyncio.run(waits.detail(died.id, wait=0.3))
    assert time.monotonic() - started >= 0.3  # it waited for the read models
    services.admin.catch_up_read_models()
    assert asyncio.run(waits.detail(died.id, wait=0)).execution.status == "pending"
