"""The http.webhook breaker in a real worker process, against a real target that fails
and then recovers: a failing target costs other handlers nothing and loses no execution."""

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest

from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.runtime.worker import WorkerConfig
from jobledger.schemas.executions import ExecutionRef

if TYPE_CHECKING:
    from tests.integration.conftest import Harness

WEBHOOK = "http.webhook"
FAIL_MAX = 3
SLOTS = 4
# pybreaker keeps the opening time in whole seconds, so a breaker may half-open up to a
# second early: 10 s keeps the measured window (from about 1 s to 4 s after the
# opening on an idle machine, twice that on a loaded one) inside the open time, so no
# probe meets the failing target.
RESET_SECONDS = 10
# The worker process parks an execution its open breaker defers for this long; only
# then does it come back, so only then can one of them be the probe.
DEFER_SECONDS = WorkerConfig().defer_when_open.total_seconds()
# Each phase's executions become ready together once all are enqueued, so the worker
# drains one backlog at its own pace rather than at the pace of the enqueueing.
ENQUEUE_LEAD = timedelta(seconds=1)  # a few transactions of a thousand runs
# Windows of one to two seconds each: a pause of a few hundred milliseconds (a
# checkpoint of the server, a collection in the worker) moves a rate by a fraction only.
# (A worker of 4 slots drains about 800 echoes a second here when nothing else runs.)
BASELINE_ECHOES = 1000
WEBHOOK_EVERY = 10  # of the open window's runs
OPEN_RUNS = 1100
# Generous for a 2-core CI machine: deferrals share the slots, and timing is noisy.
MIN_RATE_WHILE_OPEN = 0.5


@dataclass(frozen=True)
class Request:
    status: int
    key: str
    authorization: str | None
    breaker: str  # the shared breaker state when the request arrived


class Target:
    """A webhook receiver that answers 503 while failing and 200 once healthy, and
    records each request with the breaker state at its arrival."""

    def __init__(self, breaker_state: Callable[[], str]) -> None:
        self.healthy = threading.Event()
        self.healthy.set()
        self.requests: list[Request] = []
        self.breaker_state = breaker_state
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def seen(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        target = self

        class Receiver(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = 200 if target.healthy.is_set() else 503
                target.record(
                    Request(
                        status=status,
                        key=self.headers.get("Idempotency-Key", ""),
                        authorization=self.headers.get("Authorization"),
                        breaker=target.breaker_state(),
                    )
                )
                body = b"ok" if status == 200 else b"down for maintenance"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (overrides)
                pass  # keep test output clean

        return Receiver


@pytest.fixture
def target(harness: "Harness") -> Iterator[Target]:
    breaker = harness.container.breakers().get(WEBHOOK)
    target = Target(lambda: str(breaker.current_state))
    thread = threading.Thread(target=target.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield target
    finally:
        target.server.shutdown()
        target.server.server_close()
        thread.join(5)


def ready_together(
    harness: "Harness", runs: list[tuple[str, dict[str, Any]]]
) -> list[ExecutionRef]:
    ready_at = datetime.now(UTC) + ENQUEUE_LEAD
    executions = harness.run_many(runs, ready_at=ready_at)
    assert datetime.now(UTC) < ready_at, "enqueueing outlasted its lead: raise ENQUEUE_LEAD"
    return executions


def completion_rate(harness: "Harness", executions: Sequence[Execution | ExecutionRef]) -> float:
    """Completions per second, from the first lease to the last completion."""
    history = [event for e in executions for event in harness.events(e.id)]
    first = min(e.timestamp for e in history if isinstance(e, Execution.Leased))
    last = max(e.timestamp for e in history if isinstance(e, Execution.Completed))
    return len(executions) / (last - first).total_seconds()


def has(harness: "Harness", execution: Execution | ExecutionRef, *kinds: type[Any]) -> bool:
    return any(isinstance(event, kinds) for event in harness.events(execution.id))


def check_history(harness: "Harness", execution: Execution | ExecutionRef) -> int:
    """Checks one webhook execution's history; returns its failed attempts."""
    history = harness.events(execution.id)
    names = Counter(type(e).__name__ for e in history)
    assert isinstance(history[-1], Execution.Completed)
    assert names["Completed"] == 1
    assert names["Deferred"] >= 1
    assert names["DeadLettered"] == 0
    # A deferral spends no attempt: only the failures and the completion count.
    assert names["Leased"] == names["Deferred"] + names["Retried"] + 1
    assert harness.execution(execution.id).attempts_used == names["Retried"] + 1
    for index, event in enumerate(history):
        if isinstance(event, Execution.Deferred):
            assert "circuit open" in event.reason
            # Parked until its ready time, not leased again at once.
            lease = next(e for e in history[index:] if isinstance(e, Execution.Leased))
            assert lease.timestamp >= event.ready_at > event.timestamp
    return names["Retried"]


@pytest.mark.serial  # compares two completion rates of one worker: nothing else may run
def test_a_failing_target_opens_the_breaker_defers_and_recovers(
    harness: "Harness", target: Target
) -> None:
    """If the webhook target fails, then the breaker opens after about fail_max failed
    attempts, later webhook executions are deferred without spending an attempt and
    without reaching the target, test.echo executions keep completing at least at half
    their baseline rate; and once the target is healthy, a probe after the reset
    timeout closes the breaker and every webhook execution completes exactly once,
    with no secret of its request in the worker's log."""
    credential, token = uuid.uuid4().hex, uuid.uuid4().hex
    hook: dict[str, Any] = {
        "url": f"{target.url}/hook?token={token}",
        "headers": {"Authorization": f"Bearer {credential}"},
    }
    breaker = harness.container.breakers().get(WEBHOOK)
    worker = harness.start_worker(
        worker_slots=str(SLOTS),
        webhook_allow="127.0.0.1",
        breaker_fail_max=str(FAIL_MAX),
        breaker_reset_seconds=str(RESET_SECONDS),
    )
    warm_up = [harness.run("test.echo", n=i) for i in range(SLOTS)]
    harness.wait_for_all(warm_up, ExecutionStatus.COMPLETED, 20)

    baseline = ready_together(harness, [("test.echo", {"n": i}) for i in range(BASELINE_ECHOES)])
    harness.wait_for_all(baseline, ExecutionStatus.COMPLETED, 30)
    baseline_rate = completion_rate(harness, baseline)

    target.healthy.clear()
    opening = [harness.run(WEBHOOK, **hook) for _ in range(2 * SLOTS)]
    harness.wait_for(lambda: breaker.current_state == "open", 20)
    harness.wait_for(
        lambda: all(has(harness, e, Execution.Retried, Execution.Deferred) for e in opening), 20
    )
    failed = target.seen()
    assert FAIL_MAX <= len(failed) <= FAIL_MAX + SLOTS - 1  # the calls already under way
    assert {r.status for r in failed} == {503}

    # One webhook execution among every ten runs, in one backlog, while the breaker is open.
    runs = [
        (WEBHOOK, hook) if i % WEBHOOK_EVERY == 0 else ("test.echo", {"n": i})
        for i in range(OPEN_RUNS)
    ]
    batch = ready_together(harness, runs)
    echoes = [e for e, (handler, _) in zip(batch, runs, strict=True) if handler == "test.echo"]
    webhooks: list[Execution | ExecutionRef] = [*opening]
    webhooks += [e for e, (handler, _) in zip(batch, runs, strict=True) if handler == WEBHOOK]
    harness.wait_for_all(echoes, ExecutionStatus.COMPLETED, 30)
    harness.wait_for(lambda: all(has(harness, e, Execution.Deferred) for e in webhooks), 20)
    open_rate = completion_rate(harness, echoes)
    assert breaker.current_state == "open"
    assert target.seen() == failed, "a call reached the target while the breaker was open"
    assert open_rate >= MIN_RATE_WHILE_OPEN * baseline_rate, (
        f"{open_rate:.0f} echoes/s while open, {baseline_rate:.0f}/s before"
    )
    assert all(harness.execution(e.id).attempts_used <= 1 for e in webhooks)

    target.healthy.set()
    harness.wait_for(lambda: breaker.current_state == "closed", DEFER_SECONDS + 15)
    harness.wait_for_all(webhooks, ExecutionStatus.COMPLETED, DEFER_SECONDS + 15)
    log = worker.stop()

    assert sum(check_history(harness, e) for e in webhooks) == len(failed)
    delivered = target.seen()[len(failed) :]
    assert {r.status for r in delivered} == {200}
    assert sorted(r.key for r in delivered) == sorted(str(e.id) for e in webhooks)
    assert delivered[0].breaker == "half-open"  # the probe
    assert {r.authorization for r in target.seen()} == {f"Bearer {credential}"}
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert Counter(line["event"] for line in lines)["handler.webhook.delivered"] == len(webhooks)
    assert credential not in log
    assert token not in log


def test_refused_destinations_fail_their_runs_and_leave_the_breaker_closed(
    harness: "Harness", target: Target
) -> None:
    """If webhook runs name destinations the SSRF guard refuses or invalid URLs, then
    each of them fails with that reason (query strings masked), the shared breaker
    stays closed, and the next webhook to an allowed target runs at once, undeferred."""
    secret = uuid.uuid4().hex
    breaker = harness.container.breakers().get(WEBHOOK)
    worker = harness.start_worker(
        webhook_allow="127.0.0.1", breaker_fail_max=str(FAIL_MAX), breaker_reset_seconds="60"
    )
    refused = [
        harness.run(WEBHOOK, retries=0, url=f"http://10.1.2.3/hook?token={secret}"),
        harness.run(WEBHOOK, retries=0, url=f"http://169.254.169.254/latest?token={secret}"),
        harness.run(WEBHOOK, retries=0, url=f"http://[::1/hook?token={secret}"),
        harness.run(WEBHOOK, retries=0, url=f"ftp://example.com/x?token={secret}"),
        harness.run(WEBHOOK, retries=0, url=f"no scheme?token={secret}"),
    ]
    harness.wait_for_all(refused, ExecutionStatus.DEAD_LETTERED, 30)
    errors = [harness.events(e.id)[-1].error for e in refused]
    assert "10.1.2.3 is a private address" in errors[0]
    assert "cloud metadata" in errors[1] or "link-local" in errors[1]
    assert "is not a valid URL" in errors[2]
    assert "?***" in errors[2]
    assert all(secret not in error for error in errors)
    assert breaker.current_state == "closed"
    good = harness.run(WEBHOOK, url=f"{target.url}/hook")
    harness.wait_for_all([good], ExecutionStatus.COMPLETED, 20)
    assert not has(harness, good, Execution.Deferred)
    assert secret not in worker.stop()
