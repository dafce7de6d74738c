"""Circuit breakers per handler: the embedded process's one set, and Redis out of
reach. What every breaker storage does alike is the port's suite
(``ports/test_breakers.py``)."""

import asyncio
import socket
import uuid

import pytest
import redis
from structlog.testing import capture_logs

from jobledger.adapters.redis.breakers import shared_storage
from jobledger.adapters.redis.keys import Keys
from jobledger.bootstrap import bootstrap
from jobledger.infra.breakers import BreakerSettings
from jobledger.infra.outages import DependencyHealth
from jobledger.infra.settings import load_settings
from jobledger.runtime.breakers import Breakers
from jobledger.runtime.handlers.base import CircuitOpenError


async def failing() -> None:
    await asyncio.sleep(0)
    raise ConnectionError("target down")


def call(breakers: Breakers, handler: str) -> str:
    async def attempt() -> str:
        try:
            with breakers.guard(handler):
                await failing()
        except CircuitOpenError:
            return "deferred"
        except ConnectionError:
            return "failed"
        return "ok"

    return asyncio.run(attempt())


def test_without_redis_the_whole_process_shares_one_set_of_breakers(sqlite_url: str) -> None:
    """If jobledger runs embedded (no Redis), then the breakers the worker trips are the
    ones the API's system view reads: the container hands out one instance."""
    settings = load_settings(
        {}, test_handlers="true", database_url=sqlite_url, breaker_fail_max="2"
    )
    with bootstrap(settings) as container:
        worker_side, api_side = container.breakers(), container.breakers()
        assert [call(worker_side, "test.fail") for _ in range(2)] == ["failed", "failed"]
        assert api_side.states()["test.fail"] == "open"


def test_an_unreachable_redis_neither_fails_nor_counts_a_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the breakers' Redis cannot be reached, then a run under a breaker goes ahead
    (the breaker reads closed), a handler's own failure is still its own, the outage is
    reported once to the tracker, and pybreaker logs no traceback per call."""
    client = redis.Redis.from_url(f"redis://127.0.0.1:{closed_port()}/0", socket_timeout=1)
    health = DependencyHealth("worker")
    breakers = Breakers(
        shared_storage(client, Keys(f"b{uuid.uuid4().hex[:8]}")),
        BreakerSettings(fail_max=1),
        health=health,
    )

    async def succeeding() -> str:
        with breakers.guard("test.echo"):
            await asyncio.sleep(0)
        return "ok"

    try:
        with capture_logs() as logs:
            assert [asyncio.run(succeeding()) for _ in range(3)] == ["ok"] * 3
            assert [call(breakers, "test.fail") for _ in range(3)] == ["failed"] * 3
        assert breakers.states() == {"test.echo": "closed", "test.fail": "closed"}
        assert list(health.down()) == ["redis"]
        assert [e["event"] for e in logs] == ["dependency.down"]
        assert not [r for r in caplog.records if r.name.startswith("pybreaker")]
    finally:
        client.close()


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
