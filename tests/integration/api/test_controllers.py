"""The controllers in process: Litestar's TestClient over the app on the embedded store
(SQLite and the in-memory queue), with an injected clock. Fast feedback beside the
live-server tests, which serve the same app under uvicorn."""

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from litestar.testing import TestClient

from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap, web_app
from jobledger.domain.roles import Role
from jobledger.infra.settings import load_settings

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
JOB = {
    "name": "nightly report",
    "handler": "test.echo",
    "payload": {"report": "sales"},
    "schedule": {"kind": "cron", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
}


@dataclass
class Clock:
    """The app's clock: it moves only when a test moves it."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class App:
    client: TestClient  # type: ignore[type-arg]
    container: Container
    clock: Clock
    tokens: dict[Role, str]

    def as_(self, role: Role) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def project(self) -> None:
        """Bring the read models up to the log (no projector runs here)."""
        models = self.container.read_models()
        while models.step():
            pass


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    settings = load_settings({}, data_dir=str(tmp_path), test_handlers="true", mode="dev")
    migrate(settings, progress=lambda _: None)
    clock = Clock()
    with bootstrap(settings) as container:
        accounts = container.accounts()
        tokens = {}
        for role in Role:
            user = accounts.create_user(str(role), "correct horse battery", role, now=T0)
            _, tokens[role] = accounts.create_token(
                user.id, f"{role} token", role, expires_at=None, now=T0
            )
        with TestClient(web_app(container, now=clock)) as client:
            yield App(client, container, clock, tokens)


def test_a_job_is_created_changed_and_read_back_at_the_injected_time(app: App) -> None:
    """If an operator creates, pauses, resumes and updates a job, then the next fires
    follow the app's own clock, and the history lists each change with who made it."""
    operator = app.as_(Role.OPERATOR)
    created = app.client.post("/api/v1/jobs", json=JOB, headers=operator)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    # 02:30 in Berlin is 01:30 UTC in March: the next fire after 09:00 on March 1st.
    assert created.json()["next_fire_at"] == "2026-03-02T01:30:00Z"
    app.clock.now = T0 + timedelta(hours=1)
    assert app.client.post(f"/api/v1/jobs/{job_id}/pause", headers=operator).status_code == 200
    app.clock.now = T0 + timedelta(days=2)
    resumed = app.client.post(f"/api/v1/jobs/{job_id}/resume", headers=operator)
    assert resumed.json()["next_fire_at"] == "2026-03-04T01:30:00Z"
    patched = app.client.patch(
        f"/api/v1/jobs/{job_id}", json={"name": "sales report"}, headers=operator
    )
    assert patched.json()["definition"]["name"] == "sales report"
    events = app.client.get(f"/api/v1/jobs/{job_id}/events", headers=app.as_(Role.VIEWER)).json()
    assert [e["type"] for e in events] == ["JobScheduled", "JobPaused", "JobResumed", "JobUpdated"]
    assert {e["data"]["by"] for e in events} == {str(Role.OPERATOR)}
    first = app.client.get(f"/api/v1/jobs/{job_id}?as_of=1", headers=app.as_(Role.VIEWER))
    assert first.json()["definition"]["name"] == "nightly report"


def test_a_viewer_is_refused_every_change_and_nothing_is_written(app: App) -> None:
    """If a viewer's token asks for a change, then the answer is 403 and the log is as
    it was."""
    head = app.container.head()
    viewer = app.as_(Role.VIEWER)
    assert app.client.post("/api/v1/jobs", json=JOB, headers=viewer).status_code == 403
    run = {"handler": "test.echo"}
    assert app.client.post("/api/v1/executions", json=run, headers=viewer).status_code == 403
    assert app.container.head() == head


def test_an_ad_hoc_run_is_idempotent_by_key_and_shows_once_projected(app: App) -> None:
    """If a run is posted twice with one Idempotency-Key, then both answers name one
    execution; a different run under that key is a 409 naming the header; the detail is
    a 404 with a fix until the read models have it, then shows its attempts."""
    operator = {**app.as_(Role.OPERATOR), "Idempotency-Key": "order-7"}
    run = {"handler": "test.echo", "payload": {"order": 7}}
    first = app.client.post("/api/v1/executions", json=run, headers=operator)
    again = app.client.post("/api/v1/executions", json=run, headers=operator)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    other = app.client.post(
        "/api/v1/executions", json={**run, "payload": {"order": 8}}, headers=operator
    )
    assert other.status_code == 409
    assert other.json()["error"]["field"] == "Idempotency-Key"
    url = f"/api/v1/executions/{first.json()['id']}"
    early = app.client.get(url, headers=app.as_(Role.VIEWER))
    assert early.status_code == 404
    assert early.json()["error"]["fix"] == "retry in a moment"
    app.project()
    shown = app.client.get(url, headers=app.as_(Role.VIEWER))
    assert shown.status_code == 200
    assert shown.json()["execution"]["status"] == "pending"
    assert shown.json()["attempts"] == []


def test_a_cancelled_run_is_not_a_dead_letter(app: App) -> None:
    """If a pending run is cancelled, then it reads cancelled with who did it, and
    requeueing it from the dead-letter queue is a 409 that says it is not dead-lettered."""
    operator = app.as_(Role.OPERATOR)
    run = app.client.post("/api/v1/executions", json={"handler": "test.echo"}, headers=operator)
    execution_id = run.json()["id"]
    cancelled = app.client.post(
        f"/api/v1/executions/{execution_id}/cancel", json={"reason": "typo"}, headers=operator
    )
    assert cancelled.json()["status"] == "cancelled"
    refused = app.client.post(f"/api/v1/dlq/{execution_id}/requeue", headers=operator)
    assert refused.status_code == 409
    assert "not dead-lettered" in refused.json()["error"]["message"]


def test_someone_elses_token_cannot_be_revoked_or_seen(app: App) -> None:
    """If an operator asks to revoke a token of another user, then the answer is the 404
    of a missing token; an admin revokes it."""
    tokens = app.client.get("/api/v1/tokens", headers=app.as_(Role.ADMIN)).json()
    viewer_token = next(t for t in tokens if t["name"] == "viewer token")
    mine = app.client.get("/api/v1/tokens", headers=app.as_(Role.OPERATOR)).json()
    assert [t["name"] for t in mine] == ["operator token"]
    url = f"/api/v1/tokens/{viewer_token['id']}"
    assert app.client.delete(url, headers=app.as_(Role.OPERATOR)).status_code == 404
    assert app.client.delete(url, headers=app.as_(Role.ADMIN)).status_code == 200
    assert app.client.get("/api/v1/auth/me", headers=app.as_(Role.VIEWER)).status_code == 401


def test_the_overview_and_readiness_answer_on_the_embedded_store(app: App) -> None:
    """If the embedded store serves the app, then /ready answers 200 once the read models
    and the queue are caught up, and the system view reads the injected clock."""
    app.client.post("/api/v1/jobs", json=JOB, headers=app.as_(Role.OPERATOR))
    app.project()
    view = app.client.get("/api/v1/metrics/system", headers=app.as_(Role.VIEWER)).json()
    assert view["now"].startswith("2026-03-01T09:00:00")
    assert view["counts"]["jobs"]["active"] == 1
    ready = app.client.get("/ready")
    assert ready.json()["checks"]["store"]["ok"] is True


def test_an_unknown_job_is_a_404_naming_it(app: App) -> None:
    """If a job id does not exist, then reading, pausing or triggering it is a 404 that
    names the id."""
    missing = uuid.uuid4()
    for method, path in (
        ("GET", f"/api/v1/jobs/{missing}"),
        ("POST", f"/api/v1/jobs/{missing}/pause"),
        ("POST", f"/api/v1/jobs/{missing}/trigger"),
    ):
        answer = app.client.request(method, path, headers=app.as_(Role.OPERATOR))
        assert answer.status_code == 404, (method, path)
        assert str(missing) in answer.json()["error"]["message"]


def test_a_query_parameter_given_twice_is_refused(app: App) -> None:
    """If a filter that takes one value is given twice, then the list is refused with
    400 naming it, instead of one value being picked silently."""
    answer = app.client.get(
        "/api/v1/jobs?status=active&status=paused", headers=app.as_(Role.VIEWER)
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "status"
    assert answer.json()["error"]["fix"] == "give it once"


def test_a_nested_flag_sent_as_text_is_refused_with_its_path(app: App) -> None:
    """If a nested flag of a body is sent as text, then the 400 names its path and
    nothing is written."""
    head = app.container.head()
    body = {**JOB, "retry": {"jitter": "false"}}
    answer = app.client.post("/api/v1/jobs", json=body, headers=app.as_(Role.OPERATOR))
    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "retry.jitter"
    assert app.container.head() == head


def test_a_list_is_followed_along_its_cursor_over_http(app: App) -> None:
    """If jobs are listed a page at a time along next_cursor, then every job comes once
    in name order; a cursor with an offset, or a garbled one, is a 400 naming cursor."""
    operator = app.as_(Role.OPERATOR)
    for index in range(5):
        body = {**JOB, "name": f"job {index}"}
        assert app.client.post("/api/v1/jobs", json=body, headers=operator).status_code == 201
    app.project()
    names: list[str] = []
    params: dict[str, str | int] = {"limit": 2}
    while True:
        page = app.client.get("/api/v1/jobs", params=params, headers=operator).json()
        names += [item["name"] for item in page["items"]]
        if page["next_cursor"] is None:
            break
        params = {"limit": 2, "cursor": page["next_cursor"]}
    assert names == [f"job {index}" for index in range(5)]
    for bad in ({"cursor": params["cursor"], "offset": 1}, {"cursor": "garbled"}):
        refused = app.client.get("/api/v1/jobs", params=bad, headers=operator)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["field"] == "cursor"
