"""The queue routes over HTTP: list, pause, resume and drain, with their refusals."""

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import ExecutionStatus
from jobledger.domain.roles import Role
from jobledger.services.actors import Actor
from jobledger.services.executions import Executions

if TYPE_CHECKING:
    import httpx
    from tests.integration.api.conftest import Api

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

Q = "emails"


def queue_row(client: "httpx.Client", name: str) -> dict[str, Any] | None:
    response = client.get("/api/v1/queues")
    assert response.status_code == 200, response.text
    return next((q for q in response.json()["queues"] if q["name"] == name), None)


def enqueue(api: "Api", count: int) -> list[uuid.UUID]:
    spec = ExecutionSpec(handler="test.echo", queue=Q)
    executions = Executions(api.container.ledger)
    operator = Actor("operator", Role.OPERATOR)
    return [
        executions.run(spec, key=uuid.uuid4().hex, at=api_now(), by=operator).id
        for _ in range(count)
    ]


def api_now() -> datetime:
    return datetime.now(UTC)


def test_an_operator_pauses_and_resumes_and_a_viewer_sees_it(api: "Api") -> None:
    """If an operator pauses a queue, then the list shows it paused by them with the
    reason and a time; pausing again changes nothing; a resume shows it running."""
    operator, viewer = api.client(Role.OPERATOR), api.client(Role.VIEWER)
    enqueue(api, 2)
    paused = operator.post(f"/api/v1/queues/{Q}/pause", json={"reason": "provider outage"})
    assert paused.status_code == 200, paused.text
    assert paused.json() == {"name": Q, "paused": True, "changed": True}
    again = operator.post(f"/api/v1/queues/{Q}/pause", json={"reason": "again"})
    assert again.json()["changed"] is False
    api.wait_for(lambda: (queue_row(viewer, Q) or {}).get("ready") == 2)
    row = queue_row(viewer, Q)
    assert row is not None
    assert (row["paused"], row["paused_by"], row["pause_reason"]) == (
        True,
        "operator",
        "provider outage",
    )
    assert row["paused_since"] is not None
    resumed = operator.post(f"/api/v1/queues/{Q}/resume")
    assert resumed.json() == {"name": Q, "paused": False, "changed": True}
    assert queue_row(viewer, Q) == {
        "name": Q,
        "ready": 2,
        "delayed": 0,
        "leased": 0,
        "dead": 0,
        "paused": False,
        "paused_by": None,
        "paused_since": None,
        "pause_reason": None,
        "workers": 0,  # no worker runs beside this API
        "unserved_since": None,
    }


@pytest.mark.parametrize("action", ["pause", "resume", "drain"])
def test_a_viewer_is_refused_and_nothing_is_written(api: "Api", action: str) -> None:
    """If a viewer asks to pause, resume or drain, then it gets 403 and the log has not
    moved."""
    head = api.container.head()
    response = api.client(Role.VIEWER).post(
        f"/api/v1/queues/{Q}/{action}", json={"reason": "x", "dry_run": False}
    )
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "forbidden"
    assert api.container.head() == head


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        (f"{Q}/pause", {}, 400, "reason"),
        (f"{Q}/pause", {"reason": 5}, 400, "reason"),
        (f"{Q}/pause", {"reason": "x", "until": "tomorrow"}, 400, "until"),
        (f"{Q}/pause", {"reason": "  "}, 422, "reason"),
        ("Not-A-Queue/pause", {"reason": "x"}, 422, "queue"),
        (f"{Q}/drain", {"reason": "x", "dry_run": "yes"}, 400, "dry_run"),
        (f"{Q}/drain", {"reason": ""}, 422, "reason"),
    ],
)
def test_a_bad_request_names_the_field_and_writes_nothing(
    api: "Api", path: str, body: dict[str, Any], status: int, field: str
) -> None:
    """If a body or a name is wrong, then the answer is a JSON 4xx naming the field and
    a fix, and the log has not moved."""
    enqueue(api, 1)
    head = api.container.head()
    response = api.client(Role.OPERATOR).post(f"/api/v1/queues/{path}", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert field in (error.get("field") or "") + error["message"], error
    assert error.get("fix"), error
    assert api.container.head() == head


def test_a_drain_cancels_what_its_dry_run_listed(api: "Api") -> None:
    """If an operator drains a queue after a dry run, then the drain cancels exactly the
    runs the dry run listed, and they end cancelled."""
    operator = api.client(Role.OPERATOR)
    ids = sorted(enqueue(api, 3))
    checkpoint = api.container.checkpoint
    api.wait_for(lambda: len(checkpoint.pending_in(Q)) == 3)
    dry = operator.post(f"/api/v1/queues/{Q}/drain", json={"reason": "bad batch", "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json() == {"queue": Q, "dry_run": True, "cancelled": [str(i) for i in ids]}
    done = operator.post(f"/api/v1/queues/{Q}/drain", json={"reason": "bad batch"})
    assert done.json() == {"queue": Q, "dry_run": False, "cancelled": [str(i) for i in ids]}
    ledger = api.container.ledger
    assert {ledger.get_execution(i).status for i in ids} == {ExecutionStatus.CANCELLED}


def test_the_system_page_offers_operators_the_pause_toggle(api: "Api") -> None:
    """If an operator opens the system page, then each queue's row has a Pause button
    (a Resume button once paused, with who paused it and why); a viewer sees the state
    but no button."""
    enqueue(api, 1)
    api.wait_for(lambda: Q in api.container.queue.queues())
    operator = api.session("operator")
    page = operator.get("/ui/system", headers={"Accept": "text/html"})
    assert page.status_code == 200, page.text
    assert f'data-action="/api/v1/queues/{Q}/pause"' in page.text
    paused = operator.post(f"/api/v1/queues/{Q}/pause", json={"reason": "provider outage"})
    assert paused.status_code == 200, paused.text
    page = operator.get("/ui/system", headers={"Accept": "text/html"})
    assert f'data-action="/api/v1/queues/{Q}/resume"' in page.text
    assert "by operator" in page.text
    assert "provider outage" in page.text
    viewer = api.session("viewer").get("/ui/system", headers={"Accept": "text/html"})
    assert "provider outage" in viewer.text
    assert "/api/v1/queues/" not in viewer.text
