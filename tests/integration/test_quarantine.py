"""Events that cannot even be decoded, on SQLite (the embedded mode) and PostgreSQL:
every follower and every rebuild isolates them and goes on."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.integration.api.conftest import PASSWORD
from tests.integration.api.test_quarantine import POISON, Fault
from tests.integration.api.test_quarantine import enqueue as enqueue_payload
from tests.integration.raw_events import write_undecodable
from tests.integration.test_queue_projection import NOW, wait_until

from jobledger.adapters.sql.read_model_queries import SqlReadModelQueries
from jobledger.bootstrap import Container, bootstrap, build_services, read_models_on, web_app
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.roles import Role
from jobledger.infra.settings import Settings, load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.quarantine import (
    CHECKPOINT_FOLLOWER,
    JOB_SCHEDULE_FOLLOWER,
    QUEUE_FOLLOWER,
    READ_MODELS_FOLLOWER,
)
from jobledger.runtime.rebuild_processes import ProcessParts
from jobledger.services.actors import Actor

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli, LiveServer


@pytest.fixture
def container(store_settings: Settings) -> Iterator[Container]:
    with bootstrap(store_settings) as built:
        yield built


ADMIN = Actor("root", Role.ADMIN)


def enqueue(ledger: Ledger, n: int) -> uuid.UUID:
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.echo", payload={"n": n}),
        ready_at=datetime.now(tz=UTC),
        trigger=Trigger.ADHOC,
    )
    ledger.save(execution)
    return execution.id


def open_ids(container: Container) -> set[uuid.UUID]:
    backend = container.queue
    return {item.execution_id for name in backend.queues() for item in backend.items(name)}


def rows_of(container: Container) -> set[tuple[str, uuid.UUID]]:
    return {(e.follower, uuid.UUID(e.originator_id)) for e in container.quarantine().events()}


def test_undecodable_events_are_isolated_by_every_follower_and_rebuild(
    container: Container,
) -> None:
    """If stored events cannot be decoded, then the projector's followers and the
    scheduler's job index quarantine them and project the events after them; rebuilds
    of the queue and the read models skip them and say so; a retry that still fails
    keeps them, with one more attempt."""
    ledger = container.ledger
    before = enqueue(ledger, 1)
    bad_execution = write_undecodable(ledger, Execution.Enqueued.TOPIC)
    bad_job = write_undecodable(ledger, Job.Fired.TOPIC)
    after = enqueue(ledger, 2)
    projector = container.projector()
    projector.start()
    try:
        wait_until(lambda: {before, after} <= open_ids(container))
        container.scheduler().index.catch_up()
        expected = {
            (QUEUE_FOLLOWER, bad_execution),
            (CHECKPOINT_FOLLOWER, bad_execution),
            (READ_MODELS_FOLLOWER, bad_execution),
            (READ_MODELS_FOLLOWER, bad_job),
            (JOB_SCHEDULE_FOLLOWER, bad_job),
        }
        wait_until(lambda: rows_of(container) == expected)
    finally:
        projector.stop()
    # The rebuilds run with the followers stopped, as the command line runs them.
    rebuilder = container.projector()
    try:
        report = rebuilder.queue.rebuild(full=True)
    finally:
        rebuilder.close()
    assert "1 event(s) quarantined in queue-projection" in report.quarantined
    assert open_ids(container) == {before, after}
    models = container.read_models()
    assert models.rebuild() == ledger.recorder.max_notification_id()
    assert "2 event(s) quarantined in read-models" in models.isolation.summary()
    assert models.lag() == 0

    retried = build_services(container).admin.retry_quarantined(None, by=ADMIN)
    assert len(retried.failed) == len(rows_of(container))
    assert all("Cannot decode stored event" in error for _event, error in retried.failed)
    counts = {e.follower: e.attempts for e in container.quarantine().events()}
    assert counts[QUEUE_FOLLOWER] == 3  # seen by the follower, the full rebuild, the retry


def test_projections_rebuild_command_names_what_it_quarantined(
    store_settings: Settings, jobledger_cli: "JobledgerCli"
) -> None:
    """If `jobledger projections rebuild` meets an event it cannot apply, then it
    finishes the replay and its last line names the quarantined event."""
    with bootstrap(store_settings) as container:
        enqueue(container.ledger, 1)
        bad = write_undecodable(container.ledger, Execution.Completed.TOPIC)
    result = jobledger_cli.run(
        "--database-url",
        store_settings.database_url,
        "--data-dir",
        str(store_settings.data_dir),
        "projections",
        "rebuild",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("read models rebuilt: 2 events replayed")
    assert "1 event(s) quarantined in read-models" in lines[-1]
    assert str(bad) in lines[-1]


def test_a_rebuild_in_shares_quarantines_each_undecodable_event_once(
    postgres_url: str,
) -> None:
    """If the read models are rebuilt in two processes over a log with an undecodable
    execution event and an undecodable job event, then each is quarantined once (the
    execution's by its share, the job's by the rebuilding process), the summary names
    both, and every other execution is in the tables."""
    settings = load_settings({}, database_url=postgres_url)
    with bootstrap(settings) as container:
        ledger = container.ledger
        good = {enqueue(ledger, n) for n in range(6)}
        bad_execution = write_undecodable(ledger, Execution.Enqueued.TOPIC)
        bad_job = write_undecodable(ledger, Job.Fired.TOPIC)
        parts = ProcessParts(settings, 2, page_size=3, min_events=0)
        models = read_models_on(
            ledger,
            container.database,
            isolation=container.isolation(READ_MODELS_FOLLOWER),
            parts=parts,
        )
        assert models.rebuild() == ledger.recorder.max_notification_id()
        summary = models.isolation.summary()
        assert "2 event(s) quarantined in read-models" in summary, summary
        assert rows_of(container) == {
            (READ_MODELS_FOLLOWER, bad_execution),
            (READ_MODELS_FOLLOWER, bad_job),
        }
        listed = {
            row.id
            for row in SqlReadModelQueries(container.database).list_executions(limit=100).items
        }
        assert listed == good


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Fault:
    return Fault(monkeypatch)


def test_the_admin_api_retries_in_the_embedded_mode(
    tmp_path: Path,
    sqlite_url: str,
    fault: Fault,
    live_server: type["LiveServer"],
    jobledger_cli: "JobledgerCli",
) -> None:
    """If the embedded mode's projector quarantined an event and its cause is gone, then
    the admin API's retry applies it to the in-process queue (the command refuses and
    points there); asking for neither ids nor all is a 422."""
    settings = load_settings({}, database_url=sqlite_url, data_dir=str(tmp_path))
    with bootstrap(settings) as container:
        poisoned = enqueue_payload(container.ledger, POISON)
        after = enqueue(container.ledger, 1)
        user = container.accounts().create_user("admin", PASSWORD, Role.ADMIN, now=NOW)
        _, token = container.accounts().create_token(
            user.id, "t", Role.ADMIN, expires_at=None, now=NOW
        )
        projector = container.projector()
        projector.start()
        try:
            wait_until(lambda: after in open_ids(container))
            wait_until(lambda: len(container.quarantine().events()) == 3)
            refused = jobledger_cli.run(
                "--database-url", sqlite_url, "projections", "quarantine", "retry", "--all"
            )
            assert refused.returncode == 2
            assert "/api/v1/admin/quarantine/retry" in refused.stderr
            fault.on = False
            with live_server(web_app(container)) as server:
                client = httpx.Client(
                    base_url=server.url, headers={"Authorization": f"Bearer {token}"}
                )
                with client:
                    listed = client.get("/api/v1/admin/quarantine").json()
                    assert {e["originator_id"] for e in listed} == {str(poisoned)}
                    assert client.post("/api/v1/admin/quarantine/retry", json={}).status_code == 422
                    done = client.post("/api/v1/admin/quarantine/retry", json={"all": True})
                    assert done.status_code == 200, done.text
                    assert len(done.json()["applied"]) == 3
                    assert done.json()["remaining"] == 0
                    assert client.get("/ready").json()["degraded"] is False
            assert poisoned in open_ids(container)
        finally:
            projector.stop()


def test_a_queue_rebuilt_from_the_checkpoint_inherits_its_quarantine(
    container: Container, fault: Fault
) -> None:
    """If the checkpoint quarantined an event and the queue is then rebuilt from the
    checkpoint, then the queue's follower lists the event too, and a retry after the
    cause is gone puts the execution in the queue."""
    poisoned = enqueue_payload(container.ledger, POISON)
    after = enqueue(container.ledger, 1)
    projector = container.projector()
    try:
        while projector.checkpoint.step():
            pass
        assert {(e.follower, e.position) for e in container.quarantine().events()} == {
            (CHECKPOINT_FOLLOWER, 1)
        }
        assert projector.queue.rebuild().source == "checkpoint"
        assert open_ids(container) == {after}
        assert rows_of(container) == {
            (CHECKPOINT_FOLLOWER, poisoned),
            (QUEUE_FOLLOWER, poisoned),
        }
    finally:
        projector.close()
    fault.on = False
    report = build_services(container).admin.retry_quarantined(None, by=ADMIN)
    assert len(report.applied) == 2
    assert open_ids(container) == {poisoned, after}
