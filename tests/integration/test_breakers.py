"""Circuit breakers per handler, shared through Redis by every worker."""

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
from jobledger.runtime.handlers.base import (
    CircuitOpenError,
    HandlerCancelledError,
    PayloadRefusedError,
)


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


def test_a_breaker_opened_by_one_worker_is_open_for_all(redis_server: str) -> None:
    """If one worker's calls to a handler fail fail_max times in a row, then another
    worker sharing the Redis sees the breaker open and defers, while other handlers'
    breakers stay closed."""
    client = redis.Redis.from_url(redis_server)
    keys = Keys(f"b{uuid.uuid4().hex[:8]}")
    settings = BreakerSettings(fail_max=2, reset_timeout=60)
    first, second = (
        Breakers(shared_storage(client, keys), settings),
        Breakers(shared_storage(client, keys), settings),
    )
    try:
        assert [call(first, "http.webhook") for _ in range(2)] == ["failed", "failed"]
        assert call(second, "http.webhook") == "deferred"
        assert second.states()["http.webhook"] == "open"
        assert call(second, "shell.command") == "failed"  # its own breaker, still closed
    finally:
        client.close()


@pytest.mark.parametrize("handler", ["test.fail"])
def test_an_open_breaker_lets_a_probe_through_after_the_timeout(
    redis_server: str, handler: str
) -> None:
    """If the reset timeout passes, then one probe goes through; its success closes the
    breaker."""
    client = redis.Redis.from_url(redis_server)
    breakers = Breakers(
        shared_storage(client, Keys(f"b{uuid.uuid4().hex[:8]}")),
        BreakerSettings(fail_max=1, reset_timeout=2),
    )

    async def probe() -> str:
        # The shared state keeps the opening time in whole seconds: wait past the next one.
        await asyncio.sleep(3.1)
        with breakers.guard(handler):
            await asyncio.sleep(0)
        return "ok"

    try:
        assert call(breakers, handler) == "failed"
        assert call(breakers, handler) == "deferred"
        assert asyncio.run(probe()) == "ok"
        assert breakers.states()[handler] == "closed"
    finally:
        client.close()


def test_stopping_on_request_is_not_a_failure(redis_server: str) -> None:
    """If handler runs are cancelled (shutdown, lost lease), then the breaker stays
    closed: cancellation says nothing about the dependency."""
    client = redis.Redis.from_url(redis_server)
    breakers = Breakers(
        shared_storage(client, Keys(f"b{uuid.uuid4().hex[:8]}")),
        BreakerSettings(fail_max=1, reset_timeout=60),
    )

    async def cancelled() -> None:
        with breakers.guard("test.delay"):
            raise HandlerCancelledError("cancelled while sleeping")

    try:
        for _ in range(3):
            with pytest.raises(HandlerCancelledError):
                asyncio.run(cancelled())
        assert breakers.states()["test.delay"] == "closed"
    finally:
        client.close()


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


def test_refused_payloads_never_open_a_breaker(redis_server: str) -> None:
    """If a handler refuses its executions' own input (PayloadRefusedError) more than
    fail_max times in a row, then its breaker stays closed and the next call runs."""
    client = redis.Redis.from_url(redis_server)
    breakers = Breakers(
        shared_storage(client, Keys(f"b{uuid.uuid4().hex[:8]}")), BreakerSettings(fail_max=2)
    )

    async def bad_payload() -> None:
        await asyncio.sleep(0)
        raise PayloadRefusedError("http.webhook: 10.0.0.1 is a private address")

    async def refuse() -> str:
        try:
            with breakers.guard("http.webhook"):
                await bad_payload()
        except CircuitOpenError:
            return "deferred"
        except PayloadRefusedError:
            return "refused"
        return "ran"

    try:
        assert [asyncio.run(refuse()) for _ in range(5)] == ["refused"] * 5
        assert breakers.states()["http.webhook"] == "closed"
        assert call(breakers, "http.webhook") == "failed"
    finally:
        client.close()


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
