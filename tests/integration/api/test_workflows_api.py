"""Dependencies, backfill, richer schedules and workflows over real HTTP."""

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api


def _job(client: Any, name: str, key: str | None = None, **extra: Any) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    body = {"name": name, "handler": "test.echo"} | extra
    response = client.post("/api/v1/jobs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_a_cycle_is_refused_with_422_naming_its_path(api: "Api") -> None:
    """If B waits for A (named by its key) and C for B, then making A wait for C is
    refused with 422 naming the path A -> C -> B -> A, and the job page's links list
    each side."""
    client = api.client(Role.OPERATOR)
    a = _job(client, "A", key="import")
    b = _job(client, "B", depends_on=[{"job": "import"}])
    c = _job(client, "C", depends_on=[{"job": b["id"], "on": "finished"}])
    refused = client.patch(f"/api/v1/jobs/{a['id']}", json={"depends_on": [{"job": c["id"]}]})
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "depends_on"
    assert "A -> C -> B -> A" in error["message"]
    by_id = client.patch(f"/api/v1/jobs/{b['id']}", json={"depends_on": [{"job": a["id"]}]})
    assert by_id.status_code == 200
    on_a_cron = client.patch(
        f"/api/v1/jobs/{a['id']}",
        json={"depends_on": [], "schedule": {"kind": "cron", "cron": "0 6 * * *"}},
    )
    assert on_a_cron.status_code == 200
    with_both = client.patch(f"/api/v1/jobs/{a['id']}", json={"depends_on": [{"job": c["id"]}]})
    assert with_both.json()["error"]["field"] == "schedule"  # a job with depends_on has none
    links = client.get(f"/api/v1/jobs/{b['id']}/dependencies").json()
    assert [u["name"] for u in links["upstreams"]] == ["A"]
    assert [(d["name"], d["on"]) for d in links["downstreams"]] == [("C", "finished")]
    unknown = client.post(
        "/api/v1/jobs", json={"name": "D", "handler": "test.echo", "depends_on": [{"job": "nope"}]}
    )
    assert unknown.status_code == 422
    assert unknown.json()["error"]["field"] == "depends_on[0].job"
    busy = client.delete(f"/api/v1/jobs/{a['id']}")
    assert busy.status_code == 409, busy.text


def test_backfill_over_http_dry_run_then_run_then_nothing(api: "Api") -> None:
    """If an hourly job is backfilled over 24 past hours, then the dry run answers the
    counts and fires nothing, the run fires 24 in order, and a second run fires none;
    a window ending in the future is refused with 422 naming the field."""
    client = api.client(Role.OPERATOR)
    job = _job(client, "hourly", schedule={"kind": "cron", "cron": "0 * * * *"})
    end = datetime.now(tz=UTC).replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)
    window = {"start": (end - timedelta(hours=23, minutes=30)).isoformat(), "end": end.isoformat()}
    url = f"/api/v1/jobs/{job['id']}/backfill"
    dry = client.post(url, json=window | {"dry_run": True}).json()
    assert (dry["occurrences"], dry["already_fired"], dry["to_fire"], dry["fired"]) == (
        24,
        0,
        24,
        24,
    )
    assert dry["missing"] == sorted(dry["missing"])
    assert client.get(f"/api/v1/jobs/{job['id']}").json()["fired_count"] == 0
    done = client.post(url, json=window | {"reason": "gap"}).json()
    assert (done["dry_run"], done["fired"]) == (False, 24)
    assert client.get(f"/api/v1/jobs/{job['id']}").json()["fired_count"] == 24
    again = client.post(url, json=window).json()
    assert (again["already_fired"], again["fired"]) == (24, 0)
    future = client.post(url, json=window | {"end": (end + timedelta(days=1)).isoformat()})
    assert future.status_code == 422
    assert future.json()["error"]["field"] == "end"


def test_interval_schedules_preview_with_exclusions_and_jitter(api: "Api") -> None:
    """If an interval schedule excludes a date, then the preview marks the occurrences on
    that local date excluded; a saved job's preview adds its jitter to each run time,
    within the bound, and the same on every call."""
    client = api.client(Role.OPERATOR)
    schedule = {
        "kind": "interval",
        "every_seconds": 2700,
        "offset_seconds": 300,
        "timezone": "Europe/Berlin",
        "exclude_dates": ["2030-01-02"],
        "jitter_seconds": 120,
    }
    after = "2030-01-01T21:00:00+00:00"
    preview = client.post(
        "/api/v1/schedules/preview", json={"schedule": schedule, "after": after, "count": 8}
    ).json()
    fires = preview["fires"]
    # 2030-01-01T23:00Z is midnight in Berlin: from there on it is the excluded date.
    assert [f["excluded"] for f in fires] == [False, False, False, True, True, True, True, True]
    assert all(f["at"] == f["scheduled_for"] for f in fires)  # no job yet: no jitter
    job = _job(client, "interval", schedule=schedule)
    first = client.get(f"/api/v1/jobs/{job['id']}/preview?count=20").json()["fires"]
    assert first == client.get(f"/api/v1/jobs/{job['id']}/preview?count=20").json()["fires"]
    delays = [
        datetime.fromisoformat(f["at"]) - datetime.fromisoformat(f["scheduled_for"]) for f in first
    ]
    assert all(timedelta(0) <= d < timedelta(seconds=120) for d in delays)
    assert len(set(delays)) > 1
    stored = client.get(f"/api/v1/jobs/{job['id']}").json()["definition"]["schedule"]
    assert stored | {"calendars": []} == schedule | {
        "calendars": [],
        "start_at": None,
        "end_at": None,
    }


def test_a_workflow_starts_reads_and_cancels_over_http(api: "Api") -> None:
    """If a workflow is posted, then its root steps are released at once and the rest
    wait; the same Idempotency-Key returns it again; a cycle is refused with 422
    naming it; a cancel skips the waiting steps."""
    client = api.client(Role.OPERATOR)
    body = {
        "name": "nightly",
        "steps": [
            {"name": "extract", "handler": "test.delay", "payload": {"seconds": 30}},
            {"name": "load", "handler": "test.echo", "after": ["extract"]},
        ],
    }
    created = client.post("/api/v1/workflows", json=body, headers={"Idempotency-Key": "wf-1"})
    assert created.status_code == 201, created.text
    workflow = created.json()
    assert [(s["name"], s["status"]) for s in workflow["steps"]] == [
        ("extract", "released"),
        ("load", "waiting"),
    ]
    again = client.post("/api/v1/workflows", json=body, headers={"Idempotency-Key": "wf-1"})
    assert again.json()["id"] == workflow["id"]
    cyclic = body | {
        "steps": [
            {"name": "a", "handler": "test.echo", "after": ["b"]},
            {"name": "b", "handler": "test.echo", "after": ["a"]},
        ]
    }
    refused = client.post("/api/v1/workflows", json=cyclic)
    assert refused.status_code == 422
    assert "a -> b" in refused.json()["error"]["message"]
    cancelled = client.post(f"/api/v1/workflows/{workflow['id']}/cancel", json={"reason": "test"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert [s["status"] for s in cancelled.json()["steps"]] == ["released", "skipped"]
    run = client.get(f"/api/v1/executions/{workflow['steps'][0]['execution_id']}")
    api.wait_for(lambda: client.get(run.url.path).status_code == 200)
    events = client.get(f"/api/v1/workflows/{workflow['id']}/events").json()
    assert [e["type"] for e in events][:2] == ["WorkflowStarted", "WorkflowStepReleased"]
    viewer = api.client(Role.VIEWER)
    assert viewer.get(f"/api/v1/workflows/{workflow['id']}").json()["status"] == "cancelled"
    assert viewer.post("/api/v1/workflows", json=body).status_code == 403


def test_the_new_routes_read_their_input_strictly(api: "Api") -> None:
    """If a backfill, a workflow or a dependency is sent with a number or a flag as
    another type, or a route is asked with a query parameter it does not take, then it
    is refused with 400 naming the field, and nothing is written."""
    client = api.client(Role.OPERATOR)
    job = _job(client, "hourly", schedule={"kind": "cron", "cron": "0 * * * *"})
    end = datetime.now(tz=UTC) - timedelta(hours=1)
    window = {"start": (end - timedelta(hours=3)).isoformat(), "end": end.isoformat()}
    step = {"name": "only", "handler": "test.echo"}
    head = api.container.head()
    refused = [
        (f"/api/v1/jobs/{job['id']}/backfill", window | {"max": "10"}, "max"),
        (f"/api/v1/jobs/{job['id']}/backfill", window | {"dry_run": 1}, "dry_run"),
        ("/api/v1/workflows", {"steps": [step | {"priority": "5"}]}, "steps[0].priority"),
        (
            "/api/v1/jobs",
            {"name": "d", "handler": "test.echo", "pause_on_failure": "true"},
            "pause_on_failure",
        ),
        (
            "/api/v1/schedules/preview",
            {"schedule": {"kind": "interval", "every_seconds": "3600"}},
            "schedule.every_seconds",
        ),
    ]
    for path, body, field in refused:
        response = client.post(path, json=body)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["field"] == field, response.text
    for path in (f"/api/v1/jobs/{job['id']}/dependencies", f"/api/v1/workflows/{job['id']}"):
        response = client.get(path, params={"stauts": "x"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["field"] == "stauts"
    assert api.container.head() == head
