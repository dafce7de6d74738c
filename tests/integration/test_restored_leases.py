"""A handler that runs while Redis comes back empty keeps its lease (the roles as
processes on a private redis-server)."""

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from tests.integration.test_outages import (
    check_nothing_lost,
    check_ran_through,
    during,
    shared_settings,
    start_long_runs,
)
from tests.private_stores import PrivateRedis
from tests.roles import Deployment, launch, wait_until_serving

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

# Heartbeats come every third of it; the scheduler looks for expired leases every
# second, so a lease restored already expired is found before the next heartbeat.
LEASE_TTL = 6.0


def test_a_run_leased_many_ttls_ago_survives_a_flushall(
    tmp_path: Path, postgres_url: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If Redis loses its data while a handler has run for several lease ttls (its lease
    kept alive by heartbeats, which the log never saw), then the rebuilt queue gives the
    lease a grace window that the next heartbeat extends: the run completes in its first
    attempt, with no ExecutionLeaseExpired or ExecutionRetried, and no role exits."""
    server = PrivateRedis(tmp_path)
    server.start()
    shared = shared_settings(tmp_path, postgres_url, server.url)
    shared["worker_lease_ttl_seconds"] = str(LEASE_TTL)
    deployment = Deployment()
    try:
        launch(deployment, shared, tmp_path, jobledger_cli, "scheduler1")
        wait_until_serving(deployment)
        runs = start_long_runs(deployment.api_url, postgres_url, seconds=3 * LEASE_TTL)
        during(1.5 * LEASE_TTL, deployment, lambda: None)  # past the logged deadline
        redis.Redis.from_url(server.url).flushall()
        # Past the rebuild and the scheduler's look for expired leases; no role exits.
        during(LEASE_TTL / 2, deployment, list)
        check_nothing_lost(postgres_url, runs)
        check_ran_through(postgres_url, runs)  # one lease, completed: never expired
        deployment.check_alive()
    finally:
        for role in deployment.roles.values():
            role.stop()
        server.stop()
