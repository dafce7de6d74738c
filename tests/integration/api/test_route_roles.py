"""Every route against every role, over HTTP: deny by default, each role its rights."""

import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from jobledger.bootstrap import web_app
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

PUBLIC = "public"
VIEW, OPERATE, ADMIN = Role.VIEWER, Role.OPERATOR, Role.ADMIN

# The documented access table (README, "API access"): a route missing here, or an
# entry for a route that does not exist, fails the first test.
ACCESS: dict[tuple[str, str], Role | str] = {
    ("POST", "/api/v1/auth/login"): PUBLIC,
    ("POST", "/api/v1/auth/logout"): VIEW,
    ("GET", "/api/v1/auth/me"): VIEW,
    ("POST", "/api/v1/tokens"): VIEW,
    ("GET", "/api/v1/tokens"): VIEW,
    ("DELETE", "/api/v1/tokens/{token_id:uuid}"): VIEW,
    ("GET", "/api/v1/users"): ADMIN,
    ("POST", "/api/v1/users"): ADMIN,
    ("PATCH", "/api/v1/users/{user_id:uuid}"): ADMIN,
    ("DELETE", "/api/v1/users/{user_id:uuid}"): ADMIN,
    ("GET", "/api/v1/jobs"): VIEW,
    ("POST", "/api/v1/jobs"): OPERATE,
    ("GET", "/api/v1/jobs/{job_id:uuid}"): VIEW,
    ("PATCH", "/api/v1/jobs/{job_id:uuid}"): OPERATE,
    ("DELETE", "/api/v1/jobs/{job_id:uuid}"): OPERATE,
    ("POST", "/api/v1/jobs/{job_id:uuid}/pause"): OPERATE,
    ("POST", "/api/v1/jobs/{job_id:uuid}/resume"): OPERATE,
    ("POST", "/api/v1/jobs/{job_id:uuid}/trigger"): OPERATE,
    ("GET", "/api/v1/jobs/{job_id:uuid}/executions"): VIEW,
    ("GET", "/api/v1/jobs/{job_id:uuid}/events"): VIEW,
    ("GET", "/api/v1/jobs/{job_id:uuid}/preview"): VIEW,
    ("POST", "/api/v1/schedules/preview"): VIEW,
    ("POST", "/api/v1/executions"): OPERATE,
    ("GET", "/api/v1/executions"): VIEW,
    ("GET", "/api/v1/executions/{execution_id:uuid}"): VIEW,
    ("GET", "/api/v1/executions/{execution_id:uuid}/events"): VIEW,
    ("POST", "/api/v1/executions/{execution_id:uuid}/cancel"): OPERATE,
    ("POST", "/api/v1/executions/cancel"): OPERATE,
    ("POST", "/api/v1/executions/retry"): OPERATE,
    ("GET", "/api/v1/dlq"): VIEW,
    ("GET", "/api/v1/events/stream"): VIEW,
    ("GET", "/api/v1/dlq/groups"): VIEW,
    ("POST", "/api/v1/dlq/{execution_id:uuid}/requeue"): OPERATE,
    ("POST", "/api/v1/dlq/requeue"): OPERATE,
    ("POST", "/api/v1/dlq/discard"): OPERATE,
    ("DELETE", "/api/v1/dlq/{execution_id:uuid}"): OPERATE,
    ("GET", "/api/v1/queues"): VIEW,
    ("POST", "/api/v1/queues/{name:str}/pause"): OPERATE,
    ("POST", "/api/v1/queues/{name:str}/resume"): OPERATE,
    ("POST", "/api/v1/queues/{name:str}/drain"): OPERATE,
    ("GET", "/api/v1/limits"): VIEW,
    ("GET", "/api/v1/limits/{name:str}"): VIEW,
    ("POST", "/api/v1/limits"): OPERATE,
    ("PUT", "/api/v1/limits/{name:str}"): OPERATE,
    ("DELETE", "/api/v1/limits/{name:str}"): OPERATE,
    ("GET", "/api/v1/notifications"): VIEW,
    ("GET", "/api/v1/notifications/rules"): VIEW,
    ("GET", "/api/v1/notifications/rules/{name:str}"): VIEW,
    ("PUT", "/api/v1/notifications/rules/{name:str}"): ADMIN,
    ("DELETE", "/api/v1/notifications/rules/{name:str}"): ADMIN,
    ("POST", "/api/v1/notifications/rules/{name:str}/test"): ADMIN,
    ("POST", "/api/v1/notifications/rules:apply"): ADMIN,
    ("GET", "/api/v1/workers"): VIEW,
    ("GET", "/api/v1/metrics/system"): VIEW,
    ("GET", "/api/v1/audit/events"): VIEW,
    ("POST", "/api/v1/admin/queue/rebuild"): ADMIN,
    ("GET", "/api/v1/admin/queue/rebuild"): ADMIN,
    ("GET", "/api/v1/admin/queue/verify"): ADMIN,
    ("GET", "/api/v1/admin/quarantine"): ADMIN,
    ("POST", "/api/v1/admin/quarantine/retry"): ADMIN,
    ("GET", "/health"): PUBLIC,
    ("GET", "/ready"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/ui/login"): PUBLIC,
    ("GET", "/ui/static/{file_path:path}"): PUBLIC,
    ("GET", "/ui"): VIEW,
    ("GET", "/ui/jobs"): VIEW,
    ("GET", "/ui/jobs/{job_id:uuid}"): VIEW,
    ("GET", "/ui/executions"): VIEW,
    ("GET", "/ui/executions/{execution_id:uuid}"): VIEW,
    ("GET", "/ui/workers"): VIEW,
    ("GET", "/ui/dlq"): VIEW,
    ("GET", "/ui/search"): VIEW,
    ("GET", "/ui/system"): VIEW,
    ("GET", "/ui/limits"): VIEW,
    ("GET", "/ui/notifications"): VIEW,
    ("GET", "/ui/audit"): VIEW,
    ("GET", "/ui/jobs/new"): OPERATE,
    ("GET", "/ui/jobs/{job_id:uuid}/edit"): OPERATE,
    ("GET", "/api/v1/handlers"): VIEW,
    ("POST", "/api/v1/jobs:apply"): OPERATE,
    ("POST", "/api/v1/executions:batch"): OPERATE,
    # Workflows, dependencies and backfill.
    ("GET", "/api/v1/jobs/{job_id:uuid}/dependencies"): VIEW,
    ("POST", "/api/v1/jobs/{job_id:uuid}/backfill"): OPERATE,
    ("POST", "/api/v1/workflows"): OPERATE,
    ("GET", "/api/v1/workflows"): VIEW,
    ("GET", "/api/v1/workflows/{workflow_id:uuid}"): VIEW,
    ("POST", "/api/v1/workflows/{workflow_id:uuid}/cancel"): OPERATE,
    ("GET", "/api/v1/workflows/{workflow_id:uuid}/events"): VIEW,
    ("GET", "/ui/workflows"): VIEW,
    ("GET", "/ui/workflows/{workflow_id:uuid}"): VIEW,
}
# Routes whose success changes what later requests see; they run last, once per role.
_LAST = {("POST", "/api/v1/admin/queue/rebuild")}


def app_routes(api: "Api") -> set[tuple[str, str]]:
    app = web_app(api.container)
    found = set()
    for route in app.routes:
        if route.path.startswith("/schema"):
            continue
        for method in getattr(route, "methods", ()):
            if method not in {"HEAD", "OPTIONS"}:
                found.add((method, route.path))
    return found


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)


# Routes whose answer is a stream that does not end: only its status is read.
STREAMS = frozenset({"/api/v1/events/stream"})


def call(client: httpx.Client, method: str, path: str) -> httpx.Response:
    body: dict[str, object] | None = {} if method in {"POST", "PATCH"} else None
    if path not in STREAMS:
        return client.request(method, concrete(path), json=body)
    with client.stream(method, path) as response:
        if response.status_code != 200:
            response.read()
        return response


def test_the_access_table_lists_exactly_the_routes_of_the_app(api: "Api") -> None:
    """If a route is added or removed, then this table must say who may use it."""
    assert app_routes(api) == set(ACCESS)


def test_anonymous_requests_are_refused_except_public_routes(api: "Api") -> None:
    """If no session or token is sent, then every route but login, health, ready and
    metrics answers 401 with the JSON error shape."""
    anonymous = api.client()
    for (method, path), needed in sorted(ACCESS.items(), key=str):
        response = call(anonymous, method, path)
        if needed == PUBLIC:
            assert response.status_code != 401, (method, path)
        else:
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "unauthenticated"


@pytest.mark.parametrize("role", list(Role))
def test_each_role_gets_exactly_its_rights(api: "Api", role: Role) -> None:
    """If a role calls a route, then it is refused with 403 exactly when the route needs
    a higher role; otherwise it gets past the guard (any status but 401 and 403)."""
    client = api.client(role)
    ordered = sorted(ACCESS.items(), key=lambda item: (item[0] in _LAST, str(item[0])))
    for (method, path), needed in ordered:
        response = call(client, method, path)
        allowed = needed == PUBLIC or (isinstance(needed, Role) and role.includes(needed))
        if allowed:
            assert response.status_code not in {401, 403}, (role, method, path, response.text)
        else:
            assert response.status_code == 403, (role, method, path, response.text)
            assert response.json()["error"]["code"] == "forbidden"


def test_a_bad_or_revoked_token_is_refused(api: "Api") -> None:
    """If a Bearer token is unknown or revoked, then every protected route answers 401."""
    bogus = httpx.Client(base_url=api.url, headers={"Authorization": "Bearer jl_nope"})
    api.clients.append(bogus)
    assert bogus.get("/api/v1/jobs").status_code == 401
    admin = api.client(ADMIN)
    created = admin.post("/api/v1/tokens", json={"name": "short-lived", "role": "viewer"})
    assert created.status_code == 201, created.text
    token = created.json()
    reader = httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token['secret']}"})
    api.clients.append(reader)
    assert reader.get("/api/v1/jobs").status_code == 200
    assert reader.post("/api/v1/jobs", json={}).status_code == 403  # a viewer token
    assert admin.delete(f"/api/v1/tokens/{token['token']['id']}").status_code == 200
    assert reader.get("/api/v1/jobs").status_code == 401


_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_README = Path(__file__).parents[3] / "README.md"


def _template(path: str) -> str:
    """A route with its parameters unnamed: README's ``{id}`` is the app's ``{job_id:uuid}``."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def _row_routes(cell: str) -> set[tuple[str, str]]:
    """The routes of one row of README's access table, as people write them: `GET`/`POST
    /path` for two methods, and `/suffix` after `METHOD /a/b` for `METHOD /a/suffix`."""
    routes: set[tuple[str, str]] = set()
    pending: list[str] = []  # methods written alone, for the next path: `GET`/`POST /x`
    methods: list[str] = []
    last = ""
    for span in re.findall(r"`([^`]+)`", cell):
        method, _, path = span.partition(" ")
        if span in _METHODS:
            pending.append(span)
            continue
        if method in _METHODS and path.startswith("/"):
            methods, pending, last = [*pending, method], [], path
        elif span.startswith("/") and span.count("/") == 1 and last.count("/") > 1:
            last = last.rsplit("/", 1)[0] + span
        elif span.startswith("/"):
            last = span
        else:
            continue  # a note: a query parameter, a body field
        routes |= {(m, _template(last)) for m in methods or ["GET"]}
    return routes


def readme_access() -> dict[tuple[str, str], str]:
    """README's "API access" table: each route and the role it names first."""
    section = _README.read_text(encoding="utf-8").split("### API access", 1)[1]
    rows = [line for line in section.split("\n\n", 3)[2].splitlines() if line.startswith("| `")]
    table: dict[tuple[str, str], str] = {}
    for row in rows:
        cell, role = row.strip("|").rsplit("|", 1)
        for route in _row_routes(cell):
            table[route] = role.split()[0]
    return table


def test_the_readme_access_table_lists_exactly_the_routes_of_the_app(api: "Api") -> None:
    """If a route is served, then README's "API access" table lists it with the role
    it needs, and it lists no route the app does not serve."""
    served = {(m, _template(p)): str(ACCESS[m, p]) for m, p in app_routes(api)}
    documented = readme_access()
    documented.pop(("GET", "/schema"), None)  # the OpenAPI viewers: not among app_routes
    assert sorted(set(served) - set(documented)) == []
    assert sorted(set(documented) - set(served)) == []
    assert {r: documented[r] for r in served if documented[r] != served[r]} == {}
