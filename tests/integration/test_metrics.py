"""Prometheus metrics of the writer and of a worker process, scraped as Prometheus would."""

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.ports import free_port
from tests.roles import Samples, parse, total

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.infra.metrics import Metrics
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger

# Role processes on the shared PostgreSQL: one such module at a time (its connections).
pytestmark = pytest.mark.xdist_group("roles")

if TYPE_CHECKING:
    from tests.integration.conftest import Harness

AT = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def scrape_until(url: str, ready: Callable[[Samples], bool], timeout: float = 20) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        try:
            samples = parse(httpx.get(url, timeout=5).text)
        except httpx.TransportError:
            samples = {}
        if ready(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def test_the_writer_counts_appended_events_by_type(ledger: Ledger) -> None:
    """If a writer with metrics saves three new executions, then the appended counter
    for their event type, the batch histogram and the latency histogram move."""
    metrics = Metrics()
    executions = [
        Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo"), ready_at=AT, trigger=Trigger.ADHOC
        )
        for _ in range(3)
    ]
    with GroupCommitWriter(ledger, metrics=metrics) as writer:
        writer.save(*executions)
    value = metrics.registry.get_sample_value
    assert value("jobledger_events_appended_total", {"type": "Execution.Enqueued"}) == 3
    assert value("jobledger_append_batch_events_sum") == 3
    assert value("jobledger_append_batch_events_count") == 1
    assert value("jobledger_append_latency_seconds_count") == 1


def test_a_worker_process_serves_its_metrics(harness: "Harness") -> None:
    """If a worker with a metrics port runs passing and failing executions, then its
    /metrics shows leases, completions by handler and outcome, durations,
    schedule-to-start, retries, dead letters, slots and appended events."""
    passing = [harness.run("test.echo", value=i) for i in range(3)]
    failing = harness.run("test.fail", retries=1, error="boom")
    port = free_port()
    worker = harness.start_worker(metrics_port=str(port))
    harness.wait_for_all(passing, ExecutionStatus.COMPLETED, 30)
    harness.wait_for_all([failing], ExecutionStatus.DEAD_LETTERED, 30)

    def settled(samples: Samples) -> bool:
        return total(samples, "jobledger_dead_letters_total") == 1

    samples = scrape_until(f"http://127.0.0.1:{port}/metrics", settled)
    worker.stop()
    completions = "jobledger_completions_total"
    assert total(samples, completions, handler="test.echo", outcome="completed") == 3
    assert total(samples, completions, handler="test.fail", outcome="retried") == 1
    assert total(samples, completions, handler="test.fail", outcome="dead_lettered") == 1
    assert total(samples, "jobledger_leases_total") == 5
    assert total(samples, "jobledger_retries_total") == 1
    assert total(samples, "jobledger_dead_letters_total") == 1
    assert total(samples, "jobledger_execution_duration_seconds_count", handler="test.echo") == 3
    assert total(samples, "jobledger_schedule_to_start_seconds_count") == 5
    assert total(samples, "jobledger_events_appended_total", type="Execution.Leased") == 5
    assert ("jobledger_worker_slots_in_use", frozenset()) in samples


def test_the_projector_reports_where_its_followers_are(harness: "Harness") -> None:
    """If the log moves, then the projector's gauges show each follower's position
    catching up to it, with no lag left."""
    executions = [harness.run("test.echo") for _ in range(3)]
    head = harness.container.head()
    value = harness.container.metrics.registry.get_sample_value
    followers = ("queue-projection", "checkpoint-projection", "read-models")

    def caught_up() -> bool:
        positions = [value("jobledger_projection_position", {"follower": f}) for f in followers]
        return all(p is not None and p >= head for p in positions)

    harness.wait_for(caught_up, 20)
    assert value("jobledger_projection_follower_lag_events", {"follower": "read-models"}) == 0
    depth = {"queue": executions[0].spec.queue, "state": "ready"}
    assert value("jobledger_queue_depth", depth) == 3


def test_the_metrics_port_answers_the_orchestrators_probes() -> None:
    """If a role serves its metrics port, then /metrics is Prometheus text, /health is
    200, and /ready is 200 until a store it uses is in an outage, then 503 naming it and
    its error, and 200 again once it is back."""
    metrics = Metrics()
    outages: dict[str, str] = {}
    port = free_port()
    server, thread = metrics.serve(port, "127.0.0.1", down=lambda: outages)
    base = f"http://127.0.0.1:{port}"
    try:
        scraped = httpx.get(f"{base}/metrics", timeout=5)
        assert scraped.status_code == 200
        assert "jobledger_" in scraped.text
        assert httpx.get(f"{base}/health", timeout=5).json() == {"status": "ok"}
        assert httpx.get(f"{base}/ready", timeout=5).status_code == 200
        outages["redis"] = "ConnectionError: Connection refused"
        ready = httpx.get(f"{base}/ready", timeout=5)
        assert ready.status_code == 503
        assert ready.json() == {"status": "down", "down": dict(outages)}
        assert httpx.get(f"{base}/health", timeout=5).status_code == 200  # alive, waiting
        outages.clear()
        assert httpx.get(f"{base}/ready", timeout=5).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
