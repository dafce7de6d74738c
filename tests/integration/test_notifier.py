"""The notifier on PostgreSQL and Redis: which events become notifications, each once,
by the rules (ADR 108). The runs it makes are checked here; their delivery is
``notify.send``'s (tests/integration/test_notify_send.py)."""

import base64
import hashlib
import hmac
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import msgspec
import pytest
from tests.conftest import actor
from tests.integration.conftest import Harness, harness_settings
from tests.integration.raw_events import write_undecodable

from jobledger.bootstrap import Container, bootstrap, build_services
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.notifications import HANDLER, Delivery
from jobledger.domain.policies import OnFailure, RetryPolicy
from jobledger.domain.workflow import StepSpec, StepStatus, Workflow
from jobledger.infra.settings import load_settings
from jobledger.projections.quarantine import NOTIFIER_FOLLOWER
from jobledger.projections.read_models.queries import UNREADABLE
from jobledger.runtime.notifier import Notifier
from jobledger.runtime.releases import RetryLeadership
from jobledger.schemas.notifications import ChannelIn, NotificationRuleIn
from jobledger.services.application import Services

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HOOK = ChannelIn(kind="webhook", url="https://hooks.example.com/ops", secret="OPS")


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


class Clock:
    def __init__(self) -> None:
        self.now = AT

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def services(container: Container) -> Services:
    return build_services(container)


@pytest.fixture
def notifier(container: Container, clock: Clock) -> Notifier:
    made = container.notifier(RetryLeadership(1))
    made._now = clock
    return made


def save_rule(services: Services, name: str, **fields: Any) -> None:
    services.notifications.save(
        name, NotificationRuleIn(channel=HOOK, **fields), at=AT, by=actor("ana")
    )


def job(services: Services, name: str) -> Job:
    definition = JobDefinition(name=name, spec=ExecutionSpec(handler="test.fail"))
    return services.jobs.schedule(definition, at=AT, by=actor())


def run_of(
    container: Container, job_id: uuid.UUID | None, *, dies: bool, at: datetime = AT
) -> Execution:
    """A run of ``job_id`` that was dead-lettered (``dies``) or completed."""
    run = Execution.enqueue(
        spec=ExecutionSpec(handler="test.fail", retry=RetryPolicy(max_retries=0)),
        ready_at=at,
        trigger=Trigger.MANUAL if job_id else Trigger.ADHOC,
        job_id=job_id,
        trigger_key=uuid.uuid4().hex,
    )
    lease_id = uuid.uuid4()
    run.lease(worker_id="w", lease_id=lease_id, lease_expires_at=at + timedelta(minutes=1))
    if dies:
        run.fail(lease_id=lease_id, error="HTTP 503 from the ledger", at=at)
    else:
        run.complete(lease_id=lease_id, duration=timedelta(seconds=1), result={})
    container.ledger.save_all(run)
    return run


def drain(notifier: Notifier) -> None:
    while notifier.step():
        pass


def deliveries(services: Services) -> list[Delivery]:
    """The notifications made, oldest first (read from the read models' list of
    ``notify.send`` runs and their payloads)."""
    services.admin.catch_up_read_models()
    listed = services.notifications.sent(by=actor(), limit=100).notifications
    readable = [n for n in reversed(listed) if n.rule != UNREADABLE]
    runs = [services.executions.get(n.execution_id) for n in readable]
    return [msgspec.convert(run.spec.payload, Delivery) for run in runs]


def test_a_dead_letter_of_a_matching_job_notifies_once_however_often_it_is_read(
    container: Container, services: Services, notifier: Notifier
) -> None:
    """If a rule tells of a job's dead letters, then a dead letter of that job makes one
    notification (not one of another job, not a completed run, not a dead letter of a
    notification itself), and reading the log again makes none twice."""
    save_rule(services, "billing dead", on="dead_letter", job="billing")
    billing, other = job(services, "billing"), job(services, "reports")
    dead = run_of(container, billing.id, dies=True)
    run_of(container, billing.id, dies=False)
    run_of(container, other.id, dies=True)
    drain(notifier)
    (delivery,) = deliveries(services)
    assert delivery.rule == "billing dead"
    assert delivery.facts["execution_id"] == str(dead.id)
    assert "HTTP 503" in delivery.text
    assert delivery.link == f"/ui/executions/{dead.id}"
    assert delivery.channel.secret == "OPS"
    # Read again from the start, as a new leader after a crash would: nothing twice.
    again = container.notifier(RetryLeadership(1))
    with container.database.transaction() as cursor:
        again._position.write(cursor, 0)
    drain(again)
    assert len(deliveries(services)) == 1
    assert again.stats.repeated == 1
    raised = {"rule": "billing dead", "on": "dead_letter"}
    counted = container.metrics.registry.get_sample_value("jobledger_notifications_total", raised)
    assert counted == 1  # the repeat is not counted
    # A notification's own dead letter is never a cause: no loop through a dead receiver.
    save_rule(services, "everything", on="dead_letter")
    own = Execution.enqueue(
        spec=ExecutionSpec(handler=HANDLER, payload={}, retry=RetryPolicy(max_retries=0)),
        ready_at=AT,
        trigger=Trigger.ADHOC,
    )
    lease_id = uuid.uuid4()
    own.lease(worker_id="w", lease_id=lease_id, lease_expires_at=AT + timedelta(minutes=1))
    own.fail(lease_id=lease_id, error="receiver down", at=AT)
    container.ledger.save_all(own)
    drain(notifier)
    assert len(deliveries(services)) == 1


def test_runs_in_a_row_notify_at_the_run_that_reaches_the_count(
    container: Container, services: Services, notifier: Notifier
) -> None:
    """If a rule asks for 2 dead letters in a row, then a completed run breaks the
    streak, the second dead letter in a row notifies, and the third does not (one per
    streak); and the notifier waits for the read models to hold the run it looks at."""
    save_rule(services, "twice", on="failures_in_a_row", job="billing", count=2)
    billing = job(services, "billing")
    run_of(container, billing.id, dies=True)
    run_of(container, billing.id, dies=False)
    run_of(container, billing.id, dies=True)
    second = run_of(container, billing.id, dies=True)
    assert not notifier.step()  # the read models have not seen those ends yet
    assert notifier.stats.waited == 1
    services.admin.catch_up_read_models()
    drain(notifier)
    run_of(container, billing.id, dies=True)
    services.admin.catch_up_read_models()
    drain(notifier)
    (delivery,) = deliveries(services)
    assert delivery.facts["execution_id"] == str(second.id)
    assert delivery.subject == "jobledger: the last 2 runs of billing were dead-lettered"


def test_an_open_breaker_notifies_once_per_cooldown(
    container: Container, services: Services, notifier: Notifier
) -> None:
    """If runs of a handler are deferred because its breaker is open, then the breaker
    rule notifies once for the cooldown window, whatever the number of deferrals, and
    not for another handler's breaker it does not name."""
    save_rule(services, "breaker", on="breaker_opened", handler="http.webhook")
    for handler in ("http.webhook", "http.webhook", "shell.command"):
        run = Execution.enqueue(
            spec=ExecutionSpec(handler=handler), ready_at=AT, trigger=Trigger.ADHOC
        )
        lease_id = uuid.uuid4()
        run.lease(worker_id="w", lease_id=lease_id, lease_expires_at=AT + timedelta(minutes=1))
        run.defer(
            lease_id=lease_id,
            reason=f"{handler}: circuit open (failures threshold reached)",
            ready_at=AT + timedelta(seconds=30),
        )
        container.ledger.save_all(run)
    drain(notifier)
    (delivery,) = deliveries(services)
    assert delivery.facts["handler"] == "http.webhook"
    assert delivery.link == "/ui/workers"


def test_a_failed_workflow_notifies_with_its_failed_steps(
    container: Container, services: Services, notifier: Notifier
) -> None:
    """If a workflow fails and a rule names it, then one notification says which steps
    failed; a rule naming another workflow says nothing."""
    save_rule(services, "nightly", on="workflow_failed", workflow="nightly")
    save_rule(services, "weekly", on="workflow_failed", workflow="weekly")
    steps = [StepSpec(name="extract", spec=ExecutionSpec(handler="test.fail"))]
    workflow, runs = Workflow.start(
        name="nightly", steps=steps, on_failure=OnFailure.STOP, at=AT, by="ana"
    )
    workflow.settle("extract", status=StepStatus.FAILED, result=None, error="boom", at=AT)
    container.ledger.save_all(workflow, *runs)
    drain(notifier)
    (delivery,) = deliveries(services)
    assert delivery.rule == "nightly"
    assert delivery.facts["failed_steps"] == ["extract"]
    assert delivery.link == f"/ui/workflows/{workflow.id}"


def test_a_backlog_notifies_once_per_window_and_again_in_the_next(
    container: Container, services: Services, notifier: Notifier, clock: Clock
) -> None:
    """If a queue holds more due runs than a backlog rule allows, then one notification
    tells of it per cooldown window; a rule for another queue, or a disabled one, says
    nothing."""
    save_rule(services, "backlog", on="queue_backlog", queue="default", count=2)
    save_rule(services, "other", on="queue_backlog", queue="elsewhere", count=1)
    save_rule(services, "off", on="queue_backlog", count=1, enabled=False)
    for _ in range(3):
        container.ledger.save_all(
            Execution.enqueue(
                spec=ExecutionSpec(handler="test.echo"),
                ready_at=AT - timedelta(minutes=5),
                trigger=Trigger.ADHOC,
            )
        )
    projector = container.projector()
    try:
        while projector.queue.step():
            pass
    finally:
        projector.close()
    services.admin.catch_up_read_models()
    drain(notifier)
    clock.now += timedelta(seconds=30)  # a check later in the same window
    drain(notifier)
    (delivery,) = deliveries(services)
    assert delivery.facts["queue"] == "default"
    assert delivery.facts["due"] >= 3
    assert delivery.facts["oldest_waited_seconds"] >= 300
    clock.now += timedelta(minutes=10)
    drain(notifier)
    assert [d.rule for d in deliveries(services)] == ["backlog", "backlog"]


def test_a_rule_test_and_a_jobs_file_set_go_through_the_use_cases(services: Services) -> None:
    """If an admin sends a test, then a delivery run is made at once; if a set of rules
    is applied twice and then pruned, then the second apply changes nothing and the
    prune deletes only the scope's rules."""
    save_rule(services, "by hand", on="dead_letter")
    tested = services.notifications.test("by hand", at=AT, by=actor("ana"))
    (delivery,) = deliveries(services)
    assert delivery.facts == {"test": True}
    assert services.executions.get(tested.execution_id).spec.handler == HANDLER
    from jobledger.schemas.notifications import NamedRuleIn, NotificationsApplyIn  # noqa: PLC0415

    declared = [NamedRuleIn(name="from code", on="dead_letter", channel=HOOK)]
    body = NotificationsApplyIn(rules=declared, scope="jobs.toml")
    first = services.notifications.apply(body, at=AT, by=actor())
    assert [(p.name, p.action) for p in first.plan] == [("from code", "create")]
    again = services.notifications.apply(body, at=AT, by=actor())
    assert (again.applied, again.plan[0].action) == (False, "unchanged")
    pruned = NotificationsApplyIn(rules=[], scope="jobs.toml", prune=True)
    out = services.notifications.apply(pruned, at=AT, by=actor())
    assert [(p.name, p.action) for p in out.plan] == [("from code", "delete")]
    names = [r.name for r in services.notifications.rules(by=actor()).rules]
    assert names == ["by hand"]


class _Inbox(BaseHTTPRequestHandler):
    """A receiver on loopback: keeps each request's headers and raw body."""

    seen: ClassVar[list[tuple[dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (overrides)
        pass


@pytest.mark.timeout(90)
def test_a_dead_letter_reaches_a_signed_webhook_through_the_deployed_roles(
    postgres_url: str, redis_server: str
) -> None:
    """If a webhook rule names a job and a run of that job dies, then the scheduler's
    notifier makes the notification, a worker process sends it, and the receiver gets
    one request whose signature checks with the secret only the worker held; the
    delivery's run ends completed, recording where it went."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Inbox)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks/jobledger?token=s3cret"
    secret = "whsec_" + base64.b64encode(b"a key of thirty-two bytes, or so").decode()
    with bootstrap(harness_settings(postgres_url, redis_server)) as built:
        services = build_services(built)
        hook = ChannelIn(kind="webhook", url=url, secret="OPS")
        rule = NotificationRuleIn(on="dead_letter", job="billing", channel=hook)
        services.notifications.save("billing", rule, at=datetime.now(UTC), by=actor("ana"))
        projector, scheduler = built.projector(), built.scheduler_service()
        projector.start()
        scheduler.start()
        harness = Harness(built)
        try:
            harness.start_worker(webhook_allow="127.0.0.1", notify_secret_ops=secret)
            billing = job(services, "billing")
            died = run_of(built, billing.id, dies=True, at=datetime.now(UTC))
            Harness.wait_for(lambda: bool(_Inbox.seen), timeout=60)
            Harness.wait_for(lambda: _sent(services), timeout=30)
            (notification,) = services.notifications.sent(by=actor()).notifications
        finally:
            for worker in harness.workers:
                worker.stop()
            scheduler.stop()
            projector.stop()
            server.shutdown()
            server.server_close()
    ((headers, body),) = _Inbox.seen
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"
    sent = msgspec.json.decode(body)
    assert sent["facts"]["execution_id"] == str(died.id)
    assert headers["webhook-id"] == str(notification.execution_id)
    assert (notification.status, notification.to) == (
        "completed",
        f"http://127.0.0.1:{server.server_address[1]}",
    )


def _sent(services: Services) -> bool:
    services.admin.catch_up_read_models()
    found = services.notifications.sent(by=actor()).notifications
    return bool(found) and found[0].status == "completed"


def test_an_event_the_notifier_cannot_read_is_set_aside_and_the_rest_still_notify(
    container: Container, services: Services, notifier: Notifier
) -> None:
    """If a dead letter in the log no longer decodes, then the notifier quarantines it
    and goes on: the dead letters after it still notify, and the quarantine names it
    under the notifier."""
    save_rule(services, "everything", on="dead_letter")
    broken = run_of(container, None, dies=False)
    write_undecodable(container.ledger, Execution.DeadLettered.TOPIC, broken.id, version=4)
    after = run_of(container, None, dies=True)
    drain(notifier)
    (delivery,) = deliveries(services)
    assert delivery.facts["execution_id"] == str(after.id)
    quarantined = services.admin.quarantined(by=actor())
    mine = [q.originator_id for q in quarantined if q.follower == NOTIFIER_FOLLOWER]
    assert mine == [str(broken.id)]
