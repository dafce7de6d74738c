"""The REST API over HTTP on PostgreSQL and Redis: jobs, executions, dead letters,
sessions, errors. Every refused request leaves the log as it was."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import structlog

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.roles import Role

PASSWORD = "correct horse battery staple"

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

CRON_JOB: dict[str, Any] = {
    "name": "nightly report",
    "handler": "test.echo",
    "schedule": {"kind": "cron", "cron": "30 2 * * *", "timezone": "America/New_York"},
    "payload": {"report": "sales"},
}


def head(api: "Api") -> int:
    return api.container.head()


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    assert body["status"] == response.status_code
    return body


def test_bad_job_definitions_are_refused_and_write_nothing(api: "Api") -> None:
    """If a job body has an invalid cron, an unknown handler, an unknown field, a wrong
    type or is too large, then the answer is a 4xx naming the problem and the log is
    unchanged."""
    operator = api.client(Role.OPERATOR)
    before = head(api)
    cases: list[tuple[dict[str, Any] | bytes, int, str]] = [
        ({**CRON_JOB, "schedule": {"kind": "cron", "cron": "61 * * * *"}}, 422, "schedule.cron"),
        ({**CRON_JOB, "schedule": {"kind": "cron", "cron": "* * * * * *"}}, 422, "schedule.cron"),
        ({**CRON_JOB, "handler": "nope.missing"}, 422, "handler"),
        ({**CRON_JOB, "colour": "blue"}, 400, "colour"),
        ({**CRON_JOB, "priority": "high"}, 400, "priority"),
        (
            {
                **CRON_JOB,
                "schedule": {"kind": "cron", "cron": "0 * * * *", "timezone": "Mars/Base"},
            },
            422,
            "schedule.timezone",
        ),
        ({**CRON_JOB, "payload": {"blob": "x" * 70_000}}, 422, "payload"),
        (b"{" + b" " * 2_000_000 + b"}", 413, ""),
    ]
    for body, status, mentioned in cases:
        if isinstance(body, bytes):
            response = operator.post(
                "/api/v1/jobs", content=body, headers={"Content-Type": "application/json"}
            )
        else:
            response = operator.post("/api/v1/jobs", json=body)
        assert response.status_code == status, (
            body if isinstance(body, dict) else "big",
            response.text,
        )
        assert mentioned in error_of(response)["message"]
    unknown = error_of(operator.post("/api/v1/jobs", json={**CRON_JOB, "colour": "blue"}))
    assert (unknown["field"], unknown["fix"].split(";")[0]) == ("colour", "remove that field")
    nested = {**CRON_JOB, "schedule": {"kind": "manual", "zone": "UTC"}}
    assert error_of(operator.post("/api/v1/jobs", json=nested))["field"] == "schedule.zone"
    assert head(api) == before


def test_a_job_keeps_its_history_and_its_past_states(api: "Api") -> None:
    """If a job is created, updated, paused, resumed and triggered, then /events lists
    each change in order with who did it, the audit log holds those changes beside the
    executions' events, and ?as_of returns the job as it was."""
    operator = api.client(Role.OPERATOR)
    created = operator.post("/api/v1/jobs", json=CRON_JOB)
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["definition"]["schedule"]["cron"] == "30 2 * * *"
    between = datetime.now(tz=UTC)
    changed = operator.patch(
        f"/api/v1/jobs/{job['id']}",
        json={"schedule": {"kind": "cron", "cron": "0 4 * * *", "timezone": "America/New_York"}},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["version"] == 2
    assert (
        operator.post(f"/api/v1/jobs/{job['id']}/pause", json={"reason": "audit"}).status_code
        == 200
    )
    assert operator.post(f"/api/v1/jobs/{job['id']}/resume").status_code == 200
    triggered = operator.post(
        f"/api/v1/jobs/{job['id']}/trigger", headers={"Idempotency-Key": "t-1"}
    )
    assert triggered.status_code == 202, triggered.text
    again = operator.post(f"/api/v1/jobs/{job['id']}/trigger", headers={"Idempotency-Key": "t-1"})
    assert again.json()["id"] == triggered.json()["id"]

    viewer = api.client(Role.VIEWER)
    events = viewer.get(f"/api/v1/jobs/{job['id']}/events").json()
    assert [e["type"] for e in events] == [
        "JobScheduled",
        "JobUpdated",
        "JobPaused",
        "JobResumed",
        "JobTriggered",
    ]
    assert {e["data"]["by"] for e in events} == {"operator"}
    assert events[2]["data"]["reason"] == "audit"
    audit = viewer.get("/api/v1/audit/events", params={"types": "JobPaused,JobTriggered"})
    assert [(e["type"], e["data"]["by"]) for e in audit.json()["items"]] == [
        ("JobPaused", "operator"),
        ("JobTriggered", "operator"),
    ]
    everything = viewer.get("/api/v1/audit/events").json()["items"]
    assert {"JobScheduled", "ExecutionEnqueued"} <= {e["type"] for e in everything}
    past = viewer.get(f"/api/v1/jobs/{job['id']}", params={"as_of": between.isoformat()})
    assert past.json()["definition"]["schedule"]["cron"] == "30 2 * * *"
    assert viewer.get(f"/api/v1/jobs/{job['id']}", params={"as_of": "1"}).json()["version"] == 1
    now = viewer.get(f"/api/v1/jobs/{job['id']}").json()
    assert now["definition"]["schedule"]["cron"] == "0 4 * * *"
    bad = viewer.get(f"/api/v1/jobs/{job['id']}", params={"as_of": "yesterday"})
    assert bad.status_code == 400
    assert error_of(bad)["field"] == "as_of"


def test_jobs_are_listed_from_the_read_model_with_filters(api: "Api") -> None:
    """If jobs are created, then the list shows them once projected, filtered and paged."""
    operator = api.client(Role.OPERATOR)
    for i in range(5):
        body = {**CRON_JOB, "name": f"job {i}", "queue": "reports" if i % 2 else "default"}
        assert operator.post("/api/v1/jobs", json=body).status_code == 201
    viewer = api.client(Role.VIEWER)
    api.wait_for(lambda: viewer.get("/api/v1/jobs").json()["total"] == 5)
    reports = viewer.get("/api/v1/jobs", params={"queue": "reports"}).json()
    assert reports["total"] == 2
    page = viewer.get("/api/v1/jobs", params={"limit": 2, "offset": 4}).json()
    assert len(page["items"]) == 1
    preview = viewer.get(f"/api/v1/jobs/{reports['items'][0]['id']}/preview", params={"count": 3})
    assert len(preview.json()["fires"]) == 3


def test_schedule_preview_applies_the_zone_and_refuses_bad_crons(api: "Api") -> None:
    """If a cron is previewed, then its next fires come in its zone; a bad one is a 422
    naming schedule.cron."""
    viewer = api.client(Role.VIEWER)
    body = {
        "schedule": {"kind": "cron", "cron": "30 2 * * *", "timezone": "America/New_York"},
        "count": 3,
        "after": "2026-03-07T00:00:00Z",
    }
    fires = viewer.post("/api/v1/schedules/preview", json=body).json()["fires"]
    # 2:30 does not exist on 2026-03-08 in New York: it fires at 3:00 local (the DST rule).
    assert [f["local"] for f in fires] == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    bad = viewer.post(
        "/api/v1/schedules/preview", json={**body, "schedule": {"kind": "cron", "cron": "x"}}
    )
    assert bad.status_code == 422
    assert error_of(bad)["field"] == "schedule.cron"


def test_adhoc_runs_honour_the_idempotency_key(api: "Api") -> None:
    """If the same Idempotency-Key is sent twice, then one execution exists; the same key
    with another body is a 409 and writes nothing."""
    operator = api.client(Role.OPERATOR)
    body = {"handler": "test.echo", "payload": {"n": 1}}
    first = operator.post("/api/v1/executions", json=body, headers={"Idempotency-Key": "k1"})
    second = operator.post("/api/v1/executions", json=body, headers={"Idempotency-Key": "k1"})
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] == second.json()["id"]
    before = head(api)
    other = operator.post(
        "/api/v1/executions", json={**body, "payload": {"n": 2}}, headers={"Idempotency-Key": "k1"}
    )
    assert other.status_code == 409
    assert head(api) == before
    execution_id = first.json()["id"]
    viewer = api.client(Role.VIEWER)
    api.wait_for(lambda: viewer.get(f"/api/v1/executions/{execution_id}").status_code == 200)
    detail = viewer.get(f"/api/v1/executions/{execution_id}").json()
    assert detail["execution"]["status"] == "pending"
    cancelled = operator.post(f"/api/v1/executions/{execution_id}/cancel", json={"reason": "no"})
    assert cancelled.json()["status"] == "cancelled"
    events = viewer.get(f"/api/v1/executions/{execution_id}/events").json()
    assert events[-1]["type"] == "ExecutionCancelled"
    assert events[-1]["data"]["by"] == "operator"


def dead_letter(api: "Api", error: str) -> Execution:
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.fail", retry=RetryPolicy(max_retries=0)),
        ready_at=datetime.now(tz=UTC),
        trigger=Trigger.ADHOC,
    )
    lease_id = uuid.uuid4()
    execution.lease(
        worker_id="w", lease_id=lease_id, lease_expires_at=datetime.now(tz=UTC) + timedelta(1)
    )
    execution.fail(lease_id=lease_id, error=error, at=datetime.now(tz=UTC))
    api.container.ledger.save_all(execution)
    return execution


def test_dead_letters_are_requeued_and_discarded_with_who(api: "Api") -> None:
    """If dead letters exist, then the DLQ lists them; a bulk dry run counts, a requeue
    and a discard are events naming the operator, and a second discard is a 409."""
    poison = [dead_letter(api, "HTTP 503") for _ in range(3)]
    other = dead_letter(api, "bad payload")
    viewer, operator = api.client(Role.VIEWER), api.client(Role.OPERATOR)
    api.wait_for(lambda: viewer.get("/api/v1/dlq").json()["total"] == 4)
    dry = operator.post("/api/v1/dlq/requeue", json={"error_contains": "503", "dry_run": True})
    assert dry.json() == {"matched": 3, "changed": 0, "refused": 0, "dry_run": True}
    done = operator.post("/api/v1/dlq/requeue", json={"error_contains": "503", "reason": "fixed"})
    assert done.json()["changed"] == 3
    discarded = operator.delete(f"/api/v1/dlq/{other.id}", params={"reason": "obsolete"})
    assert discarded.status_code == 200, discarded.text
    assert operator.delete(f"/api/v1/dlq/{other.id}").status_code == 409
    api.wait_for(lambda: viewer.get("/api/v1/dlq").json()["total"] == 0)
    events = viewer.get(f"/api/v1/executions/{poison[0].id}/events").json()
    assert events[-1]["type"] == "ExecutionRequeued"
    assert (events[-1]["data"]["by"], events[-1]["data"]["reason"]) == ("operator", "fixed")
    # One attempt per budget, one used: the requeued run is on attempt 2 of 2, not 2 of 1.
    row = f"/api/v1/executions/{poison[0].id}"
    api.wait_for(lambda: viewer.get(row).json()["execution"]["status"] == "pending")
    execution = viewer.get(row).json()["execution"]
    assert (execution["attempt"], execution["max_attempts"]) == (2, 2)
    audit = viewer.get("/api/v1/audit/events", params={"types": "ExecutionDiscarded"}).json()
    assert [e["aggregate_id"] for e in audit["items"]] == [str(other.id)]


def test_a_requested_queue_rebuild_is_not_logged_as_a_lost_queue(api: "Api") -> None:
    """If an admin asks for a queue rebuild while the projector runs, then the log says
    who asked (queue.rebuild_requested, queue.rebuilt) and the projector follows the new
    queue (queue.rebuild_followed) instead of reporting it lost and rebuilding again."""
    admin = api.client(Role.ADMIN)
    with structlog.testing.capture_logs() as logs:
        started = admin.post("/api/v1/admin/queue/rebuild")
        assert started.status_code == 202, started.text
        api.wait_for(lambda: admin.get("/api/v1/admin/queue/rebuild").json()["state"] == "done")
        api.wait_for(lambda: any(e["event"] == "queue.rebuild_followed" for e in logs))
        execution = admin.post("/api/v1/executions", json={"handler": "test.echo"}).json()
        api.wait_for(
            lambda: any(
                i.execution_id == uuid.UUID(execution["id"])
                for i in api.container.queue.items("default")
            )
        )
    events = {e["event"]: e for e in logs}
    assert events["queue.rebuild_requested"]["requested_by"] == "admin"
    assert events["queue.rebuilt"]["requested_by"] == "admin"
    assert "queue.lost" not in events
    assert [e["event"] for e in logs].count("queue.rebuilt") == 1
    assert admin.get("/api/v1/admin/queue/verify").json()["ok"] is True


def test_cookie_sessions_need_csrf_and_end_at_logout(api: "Api") -> None:
    """If a browser signs in, then the cookie is HttpOnly and SameSite, changes need the
    CSRF header, a new sign-in rotates the session, and logout ends it."""
    raw = httpx.Client(base_url=api.url)
    api.clients.append(raw)
    login = raw.post("/api/v1/auth/login", json={"username": "operator", "password": PASSWORD})
    assert login.status_code == 200, login.text
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    csrf = login.json()["csrf_token"]
    assert raw.post("/api/v1/executions", json={"handler": "test.echo"}).status_code == 403
    ok = raw.post(
        "/api/v1/executions", json={"handler": "test.echo"}, headers={"X-CSRF-Token": csrf}
    )
    assert ok.status_code == 202
    first_session = raw.cookies.get("jl_session")
    again = raw.post("/api/v1/auth/login", json={"username": "operator", "password": PASSWORD})
    assert raw.cookies.get("jl_session") != first_session
    stale = httpx.Client(base_url=api.url, cookies={"jl_session": first_session or ""})
    api.clients.append(stale)
    assert stale.get("/api/v1/auth/me").status_code == 401
    out = raw.post("/api/v1/auth/logout", headers={"X-CSRF-Token": again.json()["csrf_token"]})
    assert out.status_code == 200
    assert raw.get("/api/v1/auth/me").status_code == 401


def test_wrong_passwords_are_throttled(api: "Api") -> None:
    """If a login fails too often, then the account is throttled with 429 and Retry-After,
    even for the right password, and the failure message never says which part was
    wrong."""
    client = api.client()
    wrong = {"username": "viewer", "password": "not the password"}
    unknown = client.post("/api/v1/auth/login", json={"username": "ghost", "password": "x"})
    first = client.post("/api/v1/auth/login", json=wrong)
    assert error_of(unknown)["message"] == error_of(first)["message"]
    for _ in range(10):
        response = client.post("/api/v1/auth/login", json=wrong)
        if response.status_code == 429:
            break
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) > 0
    right = client.post("/api/v1/auth/login", json={"username": "viewer", "password": PASSWORD})
    assert right.status_code == 429


def test_health_ready_and_metrics_are_public(api: "Api") -> None:
    """If anyone asks, then /health, /ready and /metrics answer without a login, /ready
    reports each dependency, and the system view names every handler's breaker."""
    client = api.client()
    assert client.get("/health").json() == {"status": "ok"}
    api.wait_for(lambda: client.get("/ready").status_code == 200)
    assert set(client.get("/ready").json()["checks"]) >= {"store", "queue", "queue_lag"}
    assert "jobledger_" in client.get("/metrics").text
    system = api.client(Role.VIEWER).get("/api/v1/metrics/system").json()
    assert {"counts", "queues", "workers", "projection_lag", "minutes"} <= set(system)
    assert system["breakers"]["test.echo"] == "closed"
    assert system["breakers"]["http.webhook"] == "closed"


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("POST", "/api/v1/tokens", Role.VIEWER),
        ("POST", "/api/v1/users", Role.ADMIN),
        ("POST", "/api/v1/limits", Role.OPERATOR),
        ("POST", "/api/v1/executions", Role.OPERATOR),
        ("POST", "/api/v1/jobs", Role.OPERATOR),
        ("POST", "/api/v1/workflows", Role.OPERATOR),
    ],
)
def test_a_missing_body_is_named(api: "Api", method: str, path: str, role: Role) -> None:
    """If a route that takes a JSON body gets none, then it answers 400 naming the body
    and the fix, never Litestar's argument name ``data``."""
    response = api.client(role).request(method, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "'data'" not in error["message"]
    assert error["field"] == "body"
    assert error["message"].startswith("body: ")
    assert "JSON" in error["fix"]
