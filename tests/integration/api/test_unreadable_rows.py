"""The read side is total: a read-model row with a value it cannot present (a time
outside the range of instants, JSON that does not decode) is shown with a placeholder
and its id, and never fails a page or a list (PostgreSQL, a live API)."""

import uuid
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
from tests.integration.api.conftest import PASSWORD

from jobledger.domain.instants import EARLIEST_MS, LATEST_MS
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

# ready_at of 9999-12-31T23:59:59-14:00 (in the year 10000) and of
# 0001-01-01T00:00:00+14:00 (in the year 0), as a run accepted before the range
# held on every way in left them in the read model.
YEAR_10000_MS = 253_402_350_399_000
YEAR_0_MS = -62_135_647_200_000


def _pending_run(api: "Api") -> str:
    """A run due in an hour (no worker takes it, so no event changes its row again),
    once the read model shows it."""
    client = api.client(Role.OPERATOR)
    made = client.post("/api/v1/executions", json={"handler": "test.echo", "delay_seconds": 3600})
    assert made.status_code == 202, made.text
    execution_id = str(made.json()["id"])
    api.wait_for(lambda: client.get(f"/api/v1/executions/{execution_id}").status_code == 200)
    return execution_id


def _set(url: str, sql: str, *params: Any) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute(sql, params)


def _session(api: "Api") -> httpx.Client:
    return api.session(str(Role.VIEWER), PASSWORD)


def test_an_execution_outside_the_range_is_shown_with_a_placeholder(
    module_api: "Api", module_postgres_url: str
) -> None:
    """If read-model rows hold a ready_at in the year 10000 and one in the year 0, and
    another holds a result that does not decode, then the executions list, each
    execution's detail, the dashboard's list and detail pages answer 200, showing each
    row's id with null for what it cannot present and ``unreadable`` saying why."""
    late, early, garbled = (_pending_run(module_api) for _ in range(3))
    ready = "UPDATE jobledger_rm_executions SET ready_at_ms = %s WHERE id = %s"
    _set(module_postgres_url, ready, YEAR_10000_MS, late)
    _set(module_postgres_url, ready, YEAR_0_MS, early)
    result = "UPDATE jobledger_rm_executions SET result = %s WHERE id = %s"
    _set(module_postgres_url, result, "{not json", garbled)
    client = module_api.client(Role.VIEWER)
    listed = client.get("/api/v1/executions", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    rows = {row["id"]: row for row in listed.json()["items"]}
    for execution_id, field in ((late, "ready_at"), (early, "ready_at"), (garbled, "result")):
        assert rows[execution_id][field] is None
        assert rows[execution_id]["unreadable"].startswith(f"{field}: ")
        detail = client.get(f"/api/v1/executions/{execution_id}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["execution"]["unreadable"].startswith(f"{field}: ")
    assert str(YEAR_10000_MS) in rows[late]["unreadable"]
    browser = _session(module_api)
    page = browser.get("/ui/executions")
    assert page.status_code == 200, page.text
    for execution_id in (late, early, garbled):
        assert f'data-execution="{execution_id}"' in page.text
        shown = browser.get(f"/ui/executions/{execution_id}")
        assert shown.status_code == 200, shown.text
        assert "Unreadable" in shown.text


def test_the_list_pages_past_rows_it_cannot_present(
    module_api: "Api", module_postgres_url: str
) -> None:
    """If one read-model row's enqueued time (the list's order) lies outside the range
    and another's job id is not an id at all, then the list still pages past both by
    its cursor, one row a page, each shown once with its id: the first with null for
    the time, the second as a whole placeholder."""
    late, broken = _pending_run(module_api), _pending_run(module_api)
    enqueued = "UPDATE jobledger_rm_executions SET enqueued_at_ms = %s WHERE id = %s"
    _set(module_postgres_url, enqueued, LATEST_MS + 1, late)
    job = "UPDATE jobledger_rm_executions SET job_id = %s WHERE id = %s"
    _set(module_postgres_url, job, "not-an-id", broken)
    client = module_api.client(Role.VIEWER)
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/v1/executions", params=params)
        assert page.status_code == 200, page.text
        seen += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert len({row["id"] for row in seen}) == len(seen)
    rows = {row["id"]: row for row in seen}
    assert rows[late]["enqueued_at"] is None
    assert "enqueued_at: " in rows[late]["unreadable"]
    assert rows[broken]["status"] == "(unreadable)"
    assert rows[broken]["unreadable"].startswith("row: ")
    assert _session(module_api).get(f"/ui/executions/{broken}").status_code == 200


def test_a_job_outside_the_range_is_shown_with_a_placeholder(
    module_api: "Api", module_postgres_url: str
) -> None:
    """If a job's read-model row holds a next fire before the range and a definition
    that does not decode, then the jobs list, the job, and the dashboard's jobs page
    answer 200, showing the job's id and saying what it cannot show."""
    client = module_api.client(Role.OPERATOR)
    made = client.post(
        "/api/v1/jobs", json={"name": f"far-{uuid.uuid4().hex[:6]}", "handler": "test.echo"}
    )
    assert made.status_code == 201, made.text
    job_id = str(made.json()["id"])
    module_api.wait_for(lambda: client.get(f"/api/v1/jobs/{job_id}").status_code == 200)
    _set(
        module_postgres_url,
        "UPDATE jobledger_rm_jobs SET next_fire_at_ms = %s, definition = %s WHERE id = %s",
        EARLIEST_MS - 1,
        "[broken",
        job_id,
    )
    listed = client.get("/api/v1/jobs", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    [row] = [row for row in listed.json()["items"] if row["id"] == job_id]
    assert row["next_fire_at"] is None
    assert "next_fire_at: " in row["unreadable"]
    assert "definition: " in row["unreadable"]
    page = _session(module_api).get("/ui/jobs")
    assert page.status_code == 200, page.text
    assert job_id in page.text
