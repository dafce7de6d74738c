"""The list of workflows over real HTTP: GET /api/v1/workflows (filters, pages, who
started each), the clients' list calls, the dashboard's /ui/workflows, and rows the
read model holds but cannot present (PostgreSQL, a live API with its projector)."""

import asyncio
from typing import TYPE_CHECKING, Any

import httpx
import psycopg

from jobledger.client import AsyncClient, Client
from jobledger.domain.instants import LATEST_MS
from jobledger.domain.roles import Role
from jobledger.schemas.rows import WorkflowRow

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

STEPS = [
    {"name": "a", "handler": "test.echo"},
    {"name": "b", "handler": "test.echo", "after": ["a"]},
]


def _started(api: "Api", *names: str) -> list[dict[str, Any]]:
    """Workflows started by the operator's token, in order (no worker runs them)."""
    operator = api.client(Role.OPERATOR)
    made = []
    for name in names:
        response = operator.post("/api/v1/workflows", json={"name": name, "steps": STEPS})
        assert response.status_code == 201, response.text
        made.append(response.json())
    return made


def _listed(client: httpx.Client, **params: Any) -> dict[str, Any]:
    response = client.get("/api/v1/workflows", params=params)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def _shown(api: "Api", client: httpx.Client, count: int) -> None:
    """Once the read model shows ``count`` workflows."""
    api.wait_for(lambda: _listed(client)["total"] == count)


def test_the_list_filters_pages_and_says_who_started_each(api: "Api") -> None:
    """If three workflows are started and the middle one cancelled, then a viewer's list
    shows them newest first with their steps counted and who started them; status,
    name and the start window narrow it; a page of one follows its cursor to every row
    once; a cursor with an offset and a time without an offset are refused with 400."""
    first, middle, last = _started(api, "alpha", "beta", "alpha")
    operator = api.client(Role.OPERATOR)
    assert operator.post(f"/api/v1/workflows/{middle['id']}/cancel").status_code == 200
    viewer = api.client(Role.VIEWER)
    api.wait_for(lambda: _listed(viewer, status="cancelled")["total"] == 1)
    page = _listed(viewer)
    assert [row["id"] for row in page["items"]] == [last["id"], middle["id"], first["id"]]
    assert page["total"] == 3
    newest = page["items"][0]
    assert (newest["status"], newest["step_counts"]["total"]) == ("running", 2)
    assert (newest["step_counts"]["released"], newest["step_counts"]["waiting"]) == (1, 1)
    assert (newest["started_by"], newest["started_via"]) == ("operator", "token:operator token")
    assert newest["ended_at"] is None
    cancelled = _listed(viewer, status="cancelled")["items"]
    assert [(row["id"], row["step_counts"]["skipped"]) for row in cancelled] == [(middle["id"], 1)]
    assert cancelled[0]["ended_at"] is not None
    alphas = _listed(viewer, name="alpha")["items"]
    assert [row["id"] for row in alphas] == [last["id"], first["id"]]
    assert _listed(viewer, name="alph")["total"] == 0
    since = _listed(viewer, since=middle["created_at"])["items"]
    assert [row["id"] for row in since] == [last["id"], middle["id"]]
    until = _listed(viewer, until=middle["created_at"])["items"]
    assert [row["id"] for row in until] == [first["id"]]
    walked, cursor = [], None
    while True:
        one = _listed(viewer, limit=1, **({"cursor": cursor} if cursor else {}))
        walked += [row["id"] for row in one["items"]]
        cursor = one["next_cursor"]
        if cursor is None:
            break
    assert walked == [last["id"], middle["id"], first["id"]]
    second = _listed(viewer, limit=1, offset=1)
    assert [row["id"] for row in second["items"]] == [middle["id"]]
    both = viewer.get("/api/v1/workflows", params={"cursor": second["next_cursor"], "offset": 1})
    assert (both.status_code, both.json()["error"]["field"]) == (400, "cursor")
    naive = viewer.get("/api/v1/workflows", params={"since": "2026-01-01T00:00:00"})
    assert (naive.status_code, naive.json()["error"]["field"]) == (400, "since")


def test_both_clients_list_workflows_as_typed_rows(api: "Api") -> None:
    """If the clients list workflows, then a page holds ``WorkflowRow`` items filtered
    as asked, and iterating walks every matching row along the cursor, in both the
    blocking and the async client."""
    made = _started(api, "gamma", "delta", "gamma")
    viewer = api.client(Role.VIEWER)
    _shown(api, viewer, 3)
    token = api.tokens[Role.VIEWER]
    gammas = [made[2]["id"], made[0]["id"]]
    with Client(api.url, token=token) as client:
        page = client.list_workflows(name="delta")
        assert [type(row) for row in page.items] == [WorkflowRow]
        assert [str(row.id) for row in page.items] == [made[1]["id"]]
        assert [str(row.id) for row in client.iter_workflows(name="gamma", page_size=1)] == gammas

    async def listed() -> tuple[list[str], list[str]]:
        async with AsyncClient(api.url, token=token) as client:
            page = await client.list_workflows(status="running", limit=1)
            rows = [str(row.id) async for row in client.iter_workflows(name="gamma", page_size=1)]
            return [str(row.id) for row in page.items], rows

    first, rows = asyncio.run(listed())
    assert first == [made[2]["id"]]
    assert rows == gammas


def test_a_workflow_row_it_cannot_present_fails_neither_list_nor_page(
    api: "Api", postgres_url: str
) -> None:
    """If one workflow's stored row holds a time past the range of instants and
    another's an id that is no UUID, then the API's list and the dashboard's page still
    answer 200 with every row: the first with that time as null and ``unreadable``
    saying why, the second as a placeholder with the nil id."""
    late, garbled, fine = _started(api, "late", "garbled", "fine")
    viewer = api.client(Role.VIEWER)
    _shown(api, viewer, 3)
    with psycopg.connect(postgres_url) as conn, conn.transaction():
        conn.execute(
            "UPDATE jobledger_rm_workflows SET updated_at_ms = %s WHERE id = %s",
            (LATEST_MS + 1, late["id"]),
        )
        conn.execute(
            "UPDATE jobledger_rm_workflows SET id = 'not-a-uuid' WHERE id = %s", (garbled["id"],)
        )
    rows = {row["name"]: row for row in _listed(viewer)["items"]}
    assert set(rows) == {"late", "(unreadable)", "fine"}
    assert rows["late"]["updated_at"] is None
    assert rows["late"]["unreadable"].startswith("updated_at: ")
    assert rows["(unreadable)"]["id"] == "00000000-0000-0000-0000-000000000000"
    assert rows["fine"]["id"] == fine["id"]
    browser = api.session(str(Role.VIEWER))
    shown = browser.get("/ui/workflows")
    assert shown.status_code == 200, shown.text
    assert f'data-workflow="{late["id"]}"' in shown.text
    assert f'data-workflow="{fine["id"]}"' in shown.text
    assert "(unreadable)" in shown.text
    filtered = browser.get("/ui/workflows", params={"status": "running", "name": "fine"})
    assert filtered.text.count("data-workflow=") == 1
