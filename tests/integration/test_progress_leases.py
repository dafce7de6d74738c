"""A run several lease ttls long that reports its progress keeps its one lease: on the
embedded default (`jobledger dev`: SQLite and the memory queue) and on PostgreSQL and
Redis with the roles as processes. Each progress report is an event the queue folds;
none may move the deadline its worker's heartbeats keep extending back."""

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.integration.test_dev_command import dev_process, poll, signed_in
from tests.integration.test_outages import shared_settings
from tests.roles import Deployment, admin_client, launch, wait_until_serving

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

pytestmark = [pytest.mark.slow]

# Heartbeats come every third of the ttl; the run lasts three ttls and reports its
# progress four times a ttl, each report a new message, so each one is an event.
LEASE_TTL = 2.0
RUN = {"handler": "test.progress", "payload": {"seconds": 3 * LEASE_TTL, "steps": 12}}
FINISHED = {"completed", "dead_lettered", "cancelled", "discarded"}


def run_to_the_end(client: httpx.Client) -> str:
    response = client.post("/api/v1/executions", json=RUN)
    assert response.status_code == 202, response.text
    execution_id: str = response.json()["id"]
    poll(
        client,
        f"/api/v1/executions/{execution_id}",
        until=lambda body: body.get("execution", {}).get("status") in FINISHED,
        timeout=6 * LEASE_TTL + 15,
    )
    return execution_id


def check_one_lease(client: httpx.Client, execution_id: str) -> None:
    """The run was leased once, reported every step and completed in that attempt."""
    events = client.get(f"/api/v1/executions/{execution_id}/events").json()
    names = Counter(event["type"] for event in events)
    assert names["ExecutionLeased"] == 1, names
    assert names["ExecutionLeaseExpired"] == 0, names
    assert names["ExecutionProgressed"] >= 3 * 4 - 1, names
    assert names["ExecutionCompleted"] == 1, names


def test_embedded_a_long_run_that_reports_progress_keeps_its_lease(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If a run on `jobledger dev` lasts three lease ttls and reports its progress four
    times a ttl, then it completes in its first attempt: no lease expired."""
    environ = jobledger_cli.environment(worker_lease_ttl_seconds=str(LEASE_TTL))
    with dev_process(tmp_path / "data", tmp_path / "logs", environ) as dev:
        url, username, password = dev.wait_for_login()
        with signed_in(url, username, password) as client:
            check_one_lease(client, run_to_the_end(client))


@pytest.mark.postgres
@pytest.mark.redis
def test_deployed_a_long_run_that_reports_progress_keeps_its_lease(
    tmp_path: Path, postgres_url: str, redis_server: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If a run on the deployed roles (PostgreSQL and Redis) lasts three lease ttls and
    reports its progress four times a ttl, then it completes in its first attempt."""
    shared = shared_settings(tmp_path, postgres_url, redis_server)
    shared["worker_lease_ttl_seconds"] = str(LEASE_TTL)
    deployment = Deployment()
    try:
        launch(deployment, shared, tmp_path, jobledger_cli, "scheduler1")
        wait_until_serving(deployment)
        with admin_client(deployment.api_url) as client:
            check_one_lease(client, run_to_the_end(client))
        deployment.check_alive()
    finally:
        for role in deployment.roles.values():
            role.stop()
