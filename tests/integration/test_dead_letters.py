"""Dead-letter operations on PostgreSQL and Redis: list, inspect, requeue many."""

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.conftest import actor

from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap, build_services
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.domain.policies import RetryPolicy
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.backend import QueueState
from jobledger.services.application import Services
from jobledger.services.dead_letters import DeadLetterFilter

AT = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def container(postgres_url: str, redis_server: str) -> Iterator[Container]:
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=postgres_url,
        redis_url=redis_server,
        redis_prefix=uuid.uuid4().hex[:8],
    )
    with bootstrap(settings) as built:
        yield built


def dead(
    container: Container, handler: str, error: str, payload: dict[str, object] | None = None
) -> Execution:
    execution = Execution.enqueue(
        spec=ExecutionSpec(
            handler=handler, payload=payload or {}, retry=RetryPolicy(max_retries=0)
        ),
        ready_at=AT,
        trigger=Trigger.ADHOC,
    )
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=AT + timedelta(1))
    execution.fail(lease_id=lease_id, error=error, at=AT)
    container.ledger.save_all(execution)
    return execution


def project(container: Container) -> Services:
    """The queue and the read models caught up with the log; the use cases on them."""
    projector = container.projector()
    try:
        while projector.queue.step():
            pass
    finally:
        projector.close()  # what its steps opened: not left to the collector's thread
    services = build_services(container)
    services.admin.catch_up_read_models()
    return services


def test_requeue_many_with_a_dry_run_first(container: Container) -> None:
    """If dead letters are requeued by filter, then a dry run only counts them, the real
    run gives each a new budget recorded with who and why, and a second run refuses."""
    webhooks = [dead(container, "http.webhook", "HTTP 503") for _ in range(4)]
    webhooks.append(dead(container, "http.webhook", "timed out"))
    others = [dead(container, "test.fail", "boom") for _ in range(2)]
    dead_letters = project(container).dead_letters
    ids = dead_letters.matching(DeadLetterFilter(handler="http.webhook"))
    assert set(ids) == {e.id for e in webhooks}

    def requeue(*, dry_run: bool = False) -> tuple[int, int, int]:
        report = dead_letters.requeue(
            ids,
            by=actor("alice"),
            reason="endpoint fixed",
            at=AT,
            error_contains="503",
            dry_run=dry_run,
        )
        return report.matched, report.changed, report.refused

    assert requeue(dry_run=True) == (4, 0, 0)
    assert all(
        container.ledger.get_execution(i).status is ExecutionStatus.DEAD_LETTERED for i in ids
    )
    assert requeue() == (4, 4, 0)
    project(container)
    states = {i.execution_id: i.state for i in container.queue.items("default")}
    assert [states[e.id] for e in webhooks[:4]] == [QueueState.PENDING] * 4
    assert states[webhooks[4].id] is QueueState.DEAD  # "timed out" did not match
    assert {states[e.id] for e in others} == {QueueState.DEAD}
    history = dead_letters.show(webhooks[0].id)
    assert [h["event"] for h in history] == ["Enqueued", "Leased", "DeadLettered", "Requeued"]
    assert (history[-1]["by"], history[-1]["reason"]) == ("alice", "endpoint fixed")
    assert history[2]["error"] == "HTTP 503"
    assert requeue()[2] == 4  # no longer dead-lettered: refused, nothing written


def test_discard_removes_dead_letters_from_the_queue_but_not_from_the_log(
    container: Container,
) -> None:
    """If dead letters are discarded, then they were listed by error first (the largest
    group first); a dry run only counts, the real run leaves the
    queue without them and the log with a Discarded event naming who and why; a discarded
    execution can be neither requeued nor discarded again."""
    doomed = [dead(container, "test.fail", "poison") for _ in range(3)]
    kept = dead(container, "test.fail", "flaky")
    dead_letters = project(container).dead_letters
    ids = [e.id for e in [*doomed, kept]]

    def discard(*, dry_run: bool = False) -> tuple[int, int, int]:
        report = dead_letters.discard(
            ids,
            by=actor("bob"),
            reason="obsolete",
            error_contains="poison",
            dry_run=dry_run,
        )
        return report.matched, report.changed, report.refused

    groups = [(g.handler, g.error, g.count) for g in dead_letters.groups()]
    assert groups == [("test.fail", "poison", 3), ("test.fail", "flaky", 1)]
    assert discard(dry_run=True) == (3, 0, 0)
    assert discard() == (3, 3, 0)
    project(container)
    assert dead_letters.matching(DeadLetterFilter()) == [kept.id]
    assert container.queue.depths("default", now=AT).dead == 1
    history = dead_letters.show(doomed[0].id)
    assert [h["event"] for h in history][-1] == "Discarded"
    assert (history[-1]["by"], history[-1]["reason"]) == ("bob", "obsolete")
    assert container.ledger.get_execution(doomed[0].id).status is ExecutionStatus.DISCARDED
    assert discard() == (3, 0, 3)
    requeued = dead_letters.requeue([doomed[0].id], by=actor("x"), reason="y", at=AT)
    assert (requeued.changed, requeued.refused) == (0, 1)


def test_the_dlq_commands_on_the_embedded_store(tmp_path: Path) -> None:
    """If dead letters exist, then `dlq list` shows them (and their group, by error),
    `dlq requeue --dry-run` only
    counts, `dlq requeue` requeues with who and why, `dlq show` prints the history and
    `dlq discard --id` gives up on exactly the one named."""
    settings = load_settings({}, test_handlers="true", data_dir=str(tmp_path))
    migrate(settings, progress=lambda _: None)
    with bootstrap(settings) as container:
        executions = [dead(container, "test.fail", "boom", {"order": n}) for n in range(3)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 (our own entry point, fixed arguments)
            [sys.executable, "-m", "jobledger.cli", "--data-dir", str(tmp_path), "dlq", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    listed = cli("list", "--handler", "test.fail")
    assert listed.returncode == 0, listed.stderr
    assert "3 dead letter(s)" in listed.stdout
    with bootstrap(settings) as container:
        services = build_services(container)
        services.admin.catch_up_read_models()
        [group] = services.dead_letters.groups()
    assert (group.error, group.count, group.job_id) == ("boom", 3, None)
    assert group.first_seen is not None
    assert group.last_seen is not None
    assert group.first_seen <= group.last_seen  # when the first and the last of them died
    dry = cli("requeue", "--by", "bob", "--reason", "retry all", "--dry-run")
    assert "would requeue 3 of 3" in dry.stdout
    done = cli("requeue", "--by", "bob", "--reason", "retry all")
    assert "requeued 3 of 3" in done.stdout
    shown = cli("show", str(executions[1].id))
    assert '"event": "Requeued"' in shown.stdout
    assert '"by": "bob"' in shown.stdout
    first = json.loads(shown.stdout.splitlines()[0])  # the input it was judged by
    assert (first["event"], first["spec"]["payload"]) == ("Enqueued", {"order": 1})
    with bootstrap(settings) as container:
        later = [dead(container, "test.fail", "boom") for _ in range(3)]
    one = str(later[0].id)
    dry_discard = cli("discard", "--id", one, "--by", "bob", "--reason", "gone", "--dry-run")
    assert "would discard 1 of 1" in dry_discard.stdout, dry_discard.stderr
    discarded = cli("discard", "--id", one, "--by", "bob", "--reason", "gone")
    assert "discarded 1 of 1" in discarded.stdout
    assert "2 dead letter(s)" in cli("list").stdout
