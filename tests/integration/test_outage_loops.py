"""The loops of the worker and the scheduler while Redis cannot be reached: they go
on, back off, and say so once; run in this process on PostgreSQL and a closed port."""

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from jobledger.bootstrap import Container, bootstrap
from jobledger.infra.settings import load_settings
from jobledger.runtime.scheduler import SchedulerService


@pytest.fixture
def without_redis(postgres_url: str) -> Iterator[Container]:
    """A container whose Redis URL points where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = load_settings(
        {},
        database_url=postgres_url,
        redis_url=f"redis://127.0.0.1:{port}/0",
        redis_prefix=f"u{uuid.uuid4().hex[:8]}",
        leader_poll_ms="50",
    )
    with bootstrap(settings, role="test") as container:
        yield container


def test_a_worker_keeps_running_while_redis_is_unreachable(without_redis: Container) -> None:
    """If a worker's Redis cannot be reached, then its lease loop neither raises nor
    ends: it backs off, logs one dependency.down, and stops normally when asked."""
    worker = without_redis.worker()

    async def run_for(seconds: float) -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        await worker.run(stop)

    with capture_logs() as logs:
        asyncio.run(run_for(1.5))
    events = [e["event"] for e in logs]
    assert events.count("dependency.down") == 1, events
    assert events[-1] == "worker.stopped"
    assert list(without_redis.health.down()) == ["redis"]


def test_a_scheduler_says_a_redis_outage_once(without_redis: Container) -> None:
    """If the scheduler's Redis cannot be reached, then its election tries on every
    poll but the outage is logged once, not once per try, and the loop goes on."""
    service = SchedulerService(without_redis.scheduler(), health=without_redis.health)
    with capture_logs() as logs:
        service.start()
        time.sleep(1.0)
        service.stop()
    events = [e["event"] for e in logs]
    assert events == ["dependency.down"], events
    assert (
        without_redis.metrics.registry.get_sample_value(
            "jobledger_dependency_up", {"dependency": "redis"}
        )
        == 0
    )
