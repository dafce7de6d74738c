"""Every write on behalf of a request says who asked and how they came: the events in
the log, the execution's row and the audit feed (a live API on PostgreSQL and Redis,
an API token and a signed-in session, and the scheduler's outbox relay)."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import psycopg
import pytest
from tests.integration.api.conftest import serve_api

from jobledger.bootstrap import build_services
from jobledger.domain.execution import Execution, trigger_execution_id
from jobledger.domain.roles import Role
from jobledger.schemas.outbox import OUTBOX_INSERT

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api

TOKEN_VIA = "token:operator token"  # the operator's token, as conftest names it
ECHO = {"handler": "test.echo", "payload": {"n": 1}}
JOB = {
    "name": "who-asked report",
    "handler": "test.echo",
    "schedule": {"kind": "cron", "cron": "0 3 * * *", "timezone": "UTC"},
}


@pytest.fixture(scope="module")
def served(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    with serve_api(module_postgres_url, redis_server, live_server) as api:
        yield api


def _events(api: "Api", aggregate_id: uuid.UUID | str) -> list[Any]:
    return list(api.container.ledger.history(uuid.UUID(str(aggregate_id))))


def _one(api: "Api", aggregate_id: uuid.UUID | str, kind: type) -> Any:
    [found] = [e for e in _events(api, aggregate_id) if isinstance(e, kind)]
    return found


def _row(api: "Api", client: httpx.Client, execution_id: str, field: str) -> dict[str, Any]:
    """The execution's row once the read model has ``field`` set."""
    found: dict[str, Any] = {}

    def ready() -> bool:
        response = client.get(f"/api/v1/executions/{execution_id}")
        found.update(response.json()["execution"] if response.status_code == 200 else {})
        return found.get(field) is not None

    api.wait_for(ready)
    return found


def _audited(api: "Api", client: httpx.Client, types: str, aggregate_id: str) -> dict[str, Any]:
    """The data of the audit feed's event of ``types`` for ``aggregate_id``."""
    found: list[dict[str, Any]] = []

    def listed() -> bool:
        items = client.get("/api/v1/audit/events", params={"types": types, "limit": 500})
        found[:] = [e["data"] for e in items.json()["items"] if e["aggregate_id"] == aggregate_id]
        return bool(found)

    api.wait_for(listed)
    return found[-1]


def test_an_ad_hoc_run_says_who_asked_by_token_and_by_session(served: "Api") -> None:
    """If an operator runs a handler with an API token, and an admin with a signed-in
    session, then each ExecutionEnqueued records the user and how they came (the token
    by its name, or ``session``), and the execution's row and the audit feed show
    both; the session's cancel is recorded the same way."""
    operator = served.client(Role.OPERATOR)
    by_token = operator.post("/api/v1/executions", json={**ECHO, "delay_seconds": 3600})
    assert by_token.status_code == 202, by_token.text
    session = served.session("admin")
    by_session = session.post("/api/v1/executions", json={**ECHO, "delay_seconds": 3600})
    assert by_session.status_code == 202, by_session.text
    for response, user, via in (
        (by_token, "operator", TOKEN_VIA),
        (by_session, "admin", "session"),
    ):
        execution_id = response.json()["id"]
        enqueued = _one(served, execution_id, Execution.Enqueued)
        assert (enqueued.by, enqueued.via) == (user, via)
        row = _row(served, operator, execution_id, "enqueued_via")
        assert (row["enqueued_by"], row["enqueued_via"]) == (user, via)
        audited = _audited(served, operator, "ExecutionEnqueued", execution_id)
        assert (audited["by"], audited["via"]) == (user, via)
    cancelled_id = by_token.json()["id"]
    assert session.post(f"/api/v1/executions/{cancelled_id}/cancel", json={}).status_code == 200
    cancelled = _one(served, cancelled_id, Execution.Cancelled)
    assert (cancelled.by, cancelled.via) == ("admin", "session")
    row = _row(served, operator, cancelled_id, "closed_via")
    assert (row["closed_by"], row["closed_via"]) == ("admin", "session")


def test_a_batch_says_who_asked_for_each_run(served: "Api") -> None:
    """If an operator sends a batch with a token, then every run's ExecutionEnqueued
    (saved without its constructor) records the operator and the token, and so do
    their rows."""
    operator = served.client(Role.OPERATOR)
    response = operator.post(
        "/api/v1/executions:batch", json={"runs": [ECHO, {**ECHO, "payload": {"n": 2}}]}
    )
    assert response.status_code == 202, response.text
    for ref in response.json()["executions"]:
        enqueued = _one(served, ref["id"], Execution.Enqueued)
        assert (enqueued.by, enqueued.via) == ("operator", TOKEN_VIA)
        row = _row(served, operator, ref["id"], "enqueued_via")
        assert (row["enqueued_by"], row["enqueued_via"]) == ("operator", TOKEN_VIA)


def _data(served: "Api", aggregate_id: str, event_type: str) -> dict[str, Any]:
    viewer = served.client(Role.VIEWER)
    return _audited(served, viewer, event_type, aggregate_id)


def test_every_change_to_a_job_records_who_and_via(served: "Api") -> None:
    """If a job is created, paused, resumed, triggered and backfilled over the API,
    then each event records the user and how they came, as the audit feed shows; a
    manual or backfilled run's ExecutionEnqueued records them too."""
    operator = served.client(Role.OPERATOR)
    session = served.session("operator")
    job = operator.post("/api/v1/jobs", json={**JOB, "name": f"who {uuid.uuid4().hex[:6]}"})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    assert session.post(f"/api/v1/jobs/{job_id}/pause", json={"reason": "x"}).status_code == 200
    assert operator.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
    triggered = session.post(f"/api/v1/jobs/{job_id}/trigger", headers={"Idempotency-Key": "w"})
    assert triggered.status_code in {201, 202}, triggered.text
    now = datetime.now(tz=UTC)
    backfill = {"start": (now - timedelta(days=2)).isoformat(), "end": now.isoformat()}
    assert operator.post(f"/api/v1/jobs/{job_id}/backfill", json=backfill).status_code == 200
    expected = {
        "JobScheduled": TOKEN_VIA,
        "JobPaused": "session",
        "JobResumed": TOKEN_VIA,
        "JobTriggered": "session",
        "JobBackfilled": TOKEN_VIA,
    }
    for event_type, via in expected.items():
        data = _data(served, job_id, event_type)
        assert (data["by"], data["via"]) == ("operator", via), event_type
    runs = [e.execution_id for e in _events(served, job_id) if getattr(e, "execution_id", None)]
    assert runs  # the trigger's run and the backfill's fires
    for execution_id in runs:
        enqueued = _one(served, execution_id, Execution.Enqueued)
        assert enqueued.by == "operator"
        assert enqueued.via in {"session", TOKEN_VIA}


def _who(served: "Api", types: str, field: str, value: str) -> list[tuple[str, str]]:
    """(by, via) of each audited event of ``types`` whose ``field`` is ``value``."""
    page = served.client(Role.VIEWER).get(
        "/api/v1/audit/events", params={"types": types, "limit": 500}
    )
    items = page.json()["items"]
    return [(e["data"]["by"], e["data"]["via"]) for e in items if e["data"].get(field) == value]


def test_queue_and_limit_changes_record_who_and_via(served: "Api") -> None:
    """If a queue is paused and resumed and a named limit defined and changed, once
    from a session and once with a token, then each event records the user and how
    they came, as the audit feed shows."""
    operator = served.client(Role.OPERATOR)
    session = served.session("operator")
    both = [("operator", "session"), ("operator", TOKEN_VIA)]
    queue = f"who-{uuid.uuid4().hex[:6]}"
    assert session.post(f"/api/v1/queues/{queue}/pause", json={"reason": "x"}).status_code == 200
    assert operator.post(f"/api/v1/queues/{queue}/resume").status_code == 200
    assert _who(served, "QueuePaused,QueueResumed", "queue", queue) == both
    name = f"who{uuid.uuid4().hex[:6]}"
    limit = {"name": name, "rate": 10, "per_seconds": 60}
    assert session.post("/api/v1/limits", json=limit).status_code == 201
    changed = operator.put(f"/api/v1/limits/{name}", json={"rate": 20, "per_seconds": 60})
    assert changed.status_code == 200, changed.text
    assert _who(served, "LimitDefined,LimitChanged", "name", name) == both


def test_a_run_the_outbox_relays_says_it_came_by_the_outbox(
    served: "Api", module_postgres_url: str
) -> None:
    """If an application writes a run into the outbox, then the relay's
    ExecutionEnqueued records ``outbox`` as who and how, and so does its row."""
    outbox = build_services(served.container).outbox
    assert outbox is not None
    key = f"who-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(module_postgres_url) as conn, conn.transaction():
        conn.execute(OUTBOX_INSERT, (key, msgspec.json.encode(ECHO).decode()))
    assert outbox.relay(at=datetime.now(tz=UTC)).enqueued == 1
    execution_id = trigger_execution_id(None, key)
    enqueued = _one(served, execution_id, Execution.Enqueued)
    assert (enqueued.by, enqueued.via) == ("outbox", "outbox")
    row = _row(served, served.client(Role.VIEWER), str(execution_id), "enqueued_via")
    assert (row["enqueued_by"], row["enqueued_via"]) == ("outbox", "outbox")
