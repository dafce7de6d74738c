"""Every list of the API is paged: ``limit`` and an opaque ``cursor``, the next page's
cursor in the body (``next_cursor``) or, for a list answered as an array, in its
``Link`` header; paging to the end shows every row once; a bad page is a 400."""

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from jobledger.client import Client
from jobledger.client import calls as client_calls
from jobledger.domain.roles import Role
from jobledger.infra.presence import WorkerInfo

if TYPE_CHECKING:
    import httpx
    from tests.integration.api.conftest import Api

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

Rows = Callable[["httpx.Response"], list[Any]]
Next = Callable[["httpx.Response"], str | None]


def in_body(field: str) -> tuple[Rows, Next]:
    return (lambda r: r.json()[field]), (lambda r: r.json()["next_cursor"])


def in_link() -> tuple[Rows, Next]:
    return (lambda r: r.json()), (lambda r: client_calls.next_cursor_of(r.headers.get("link")))


def walk(client: "httpx.Client", path: str, how: tuple[Rows, Next], limit: int) -> list[Any]:
    """Every row of the list, page by page; each page but the last holds ``limit``."""
    rows_of, next_of = how
    rows: list[Any] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        response = client.get(path, params=params)
        assert response.status_code == 200, response.text
        page, cursor = rows_of(response), next_of(response)
        pages += 1
        rows += page
        if cursor is None:
            assert len(page) <= limit
            break
        assert len(page) == limit
    assert pages > 1, f"{path}: one page only"
    return rows


def seed(api: "Api") -> dict[str, uuid.UUID]:
    """Rows for every list: limits, queues, tokens, users, quarantine, workers, and a
    job, a run and a workflow with several events each."""
    operator, admin = api.client(Role.OPERATOR), api.client(Role.ADMIN)
    for n in range(5):
        made = operator.post("/api/v1/limits", json={"name": f"lim{n}", "concurrency": 1})
        assert made.status_code == 201, made.text
        run = {"handler": "test.echo", "queue": f"q{n}"}
        key = {"Idempotency-Key": uuid.uuid4().hex}
        assert operator.post("/api/v1/executions", json=run, headers=key).status_code == 202
        assert admin.post("/api/v1/tokens", json={"name": f"t{n}"}).status_code == 201
        user = {"username": f"user{n}", "password": "a long enough secret 42", "role": "viewer"}
        assert admin.post("/api/v1/users", json=user).status_code == 201, user
    now = datetime.now(UTC)
    quarantine = api.container.quarantine()
    for n in range(5):
        row = (10_000 + n, uuid.uuid4(), 1, "jobledger:Nothing", b"{}")
        quarantine.record("read-models", row, "test", at=now)
        api.container.presence.report(
            WorkerInfo(worker_id=f"w{n}", queues=("q0",), slots=1, running=(), last_heartbeat=now)
        )
    job = {"name": "paged", "handler": "test.echo", "schedule": {"kind": "manual"}}
    job_id = uuid.UUID(operator.post("/api/v1/jobs", json=job).json()["id"])
    for _ in range(2):
        assert operator.post(f"/api/v1/jobs/{job_id}/pause", json={"reason": "x"}).is_success
        assert operator.post(f"/api/v1/jobs/{job_id}/resume").is_success
    key = {"Idempotency-Key": uuid.uuid4().hex}
    made = operator.post("/api/v1/executions", json={"handler": "test.echo"}, headers=key)
    run_id = uuid.UUID(made.json()["id"])
    assert operator.post(f"/api/v1/executions/{run_id}/cancel", json={"reason": "x"}).is_success
    steps = [{"name": "a", "handler": "test.echo"}, {"name": "b", "handler": "test.echo"}]
    flow = operator.post("/api/v1/workflows", json={"name": "f", "steps": steps})
    assert flow.status_code == 201, flow.text
    flow_id = uuid.UUID(flow.json()["id"])
    assert operator.post(f"/api/v1/workflows/{flow_id}/cancel").is_success
    api.wait_for(lambda: {f"q{n}" for n in range(5)} <= api.container.queue.queues())
    api.wait_for(lambda: {f"lim{n}" for n in range(5)} <= set(api.container.queue.named_limits()))
    return {"job": job_id, "run": run_id, "workflow": flow_id}


def lists(ids: dict[str, uuid.UUID]) -> list[tuple[str, tuple[Rows, Next], Callable[[Any], Any]]]:
    """Each list: its path, where its rows and next cursor are, and a row's identity."""
    return [
        ("/api/v1/limits", in_body("limits"), lambda r: r["name"]),
        ("/api/v1/queues", in_body("queues"), lambda r: r["name"]),
        ("/api/v1/tokens", in_link(), lambda r: r["id"]),
        ("/api/v1/users", in_link(), lambda r: r["id"]),
        ("/api/v1/admin/quarantine", in_link(), lambda r: r["id"]),
        ("/api/v1/workers", in_link(), lambda r: r["worker_id"]),
        ("/api/v1/handlers", in_link(), lambda r: r["name"]),
        (f"/api/v1/jobs/{ids['job']}/events", in_link(), lambda r: r["version"]),
        (f"/api/v1/executions/{ids['run']}/events", in_link(), lambda r: r["version"]),
        (f"/api/v1/workflows/{ids['workflow']}/events", in_link(), lambda r: r["version"]),
    ]


def test_paging_each_list_to_its_end_shows_every_row_once(api: "Api") -> None:
    """If every list is read a page of 2 (or 1) at a time along its cursor, then the
    rows are exactly those of one read of the whole list, each once, in its order."""
    ids = seed(api)
    admin = api.client(Role.ADMIN)
    for path, how, identity in lists(ids):
        whole = admin.get(path, params={"limit": 500})
        assert whole.status_code == 200, whole.text
        everything = [identity(row) for row in how[0](whole)]
        limit = 1 if "executions/" in path else 2
        paged = [identity(row) for row in walk(admin, path, how, limit)]
        assert paged == everything, path
        assert len(set(paged)) == len(paged), path


@pytest.mark.parametrize("limit", ["0", "501", "-1", "many"])
def test_a_page_size_out_of_range_is_refused(api: "Api", limit: str) -> None:
    """If any list is asked for a page of 0, 501, -1 or a word, then it answers 400
    naming limit and the integer it expects, on every list."""
    ids = {"job": uuid.uuid4(), "run": uuid.uuid4(), "workflow": uuid.uuid4()}
    admin = api.client(Role.ADMIN)
    for path, _, _ in lists(ids):
        response = admin.get(path, params={"limit": limit})
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert error["field"] == "limit", path
        assert "Expected `int`" in error["message"], (path, error)


def test_a_cursor_of_no_page_of_the_list_is_refused(api: "Api") -> None:
    """If a list is given a cursor that is not one, or one of another list, then it
    answers 400 naming cursor and how to get a good one."""
    ids = seed(api)
    admin = api.client(Role.ADMIN)
    foreign = admin.get("/api/v1/limits", params={"limit": 1}).json()["next_cursor"]
    assert foreign
    numeric = client_calls.next_cursor_of(
        admin.get(f"/api/v1/jobs/{ids['job']}/events", params={"limit": 1}).headers["link"]
    )
    for path, _, _ in lists(ids):
        wrong = numeric if path == "/api/v1/limits" else foreign
        for cursor in ("bm90IGpzb24", "!!", wrong):
            response = admin.get(path, params={"cursor": cursor})
            assert response.status_code == 400, (path, cursor, response.text)
            error = response.json()["error"]
            assert error["field"] == "cursor", path
            assert "no such query parameter" not in error["message"], path


def test_the_client_pages_and_reads_whole_lists(api: "Api") -> None:
    """If the client reads the lists, then a page call follows the cursor to every row,
    and the whole-list calls return every row as before."""
    ids = seed(api)
    with Client(api.url, token=api.tokens[Role.ADMIN]) as client:
        pages = list(client.iter_pages(client_calls.job_history(ids["job"], limit=2)))
        assert len(pages) > 1
        versions = [event.version for page in pages for event in page.items]
        assert versions == [event.version for event in client.job_history(ids["job"])]
        assert versions == list(range(1, len(versions) + 1))
        first = client.queues(limit=2)
        assert len(first.queues) == 2
        assert first.next_cursor is not None
        rest = list(client.iter_pages(client_calls.queues(2, first.next_cursor)))
        names = [q.name for q in first.queues] + [q.name for p in rest for q in p.queues]
        assert names == [q.name for q in client.queues().queues]
        assert [lim.name for lim in client.limits().limits] == [f"lim{n}" for n in range(5)]
        assert client.limits(limit=2).next_cursor is not None
        assert len(client.workflows.history(ids["workflow"])) > 1
        assert client.handlers()
