"""Headers every response carries, and the OpenAPI pages, over HTTP."""

import re

import pytest
from tests.integration.api.conftest import Api

from jobledger.domain.roles import Role

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

# The OpenAPI viewers litestar can serve; none may load anything from elsewhere.
SCHEMA_PAGES = ["", "/", "/swagger", "/redoc", "/elements", "/rapidoc", "/openapi.json"]
_EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?(https?:)?//""", re.IGNORECASE)


def test_every_response_says_nosniff(api: Api) -> None:
    """If any kind of response is sent (API data, an error, a page, a static file,
    the metrics, the schema, an unknown path), then it carries
    X-Content-Type-Options: nosniff."""
    viewer, anonymous = api.client(Role.VIEWER), api.client()
    responses = [
        viewer.get("/api/v1/jobs"),
        viewer.post("/api/v1/jobs", json={}),  # 403 for a viewer
        anonymous.get("/api/v1/jobs"),  # 401
        anonymous.get("/no/such/path"),  # 404 from the router
        anonymous.post("/api/v1/auth/login", content="x", headers={"Content-Type": "text/plain"}),
        anonymous.delete("/health"),  # 405
        anonymous.get("/health"),
        anonymous.get("/ready"),
        anonymous.get("/metrics"),
        anonymous.get("/schema/openapi.json"),
        anonymous.get("/ui/login"),
        anonymous.get("/ui/static/dashboard.css"),
    ]
    for response in responses:
        assert response.headers.get("x-content-type-options") == "nosniff", (
            response.request.url,
            response.status_code,
        )
    assert {r.status_code for r in responses} >= {200, 401, 403, 404, 405, 415}


def test_the_openapi_pages_load_nothing_from_elsewhere(api: Api) -> None:
    """If any OpenAPI page under /schema is fetched, then it is the JSON document or
    not found: no HTML page that loads scripts or styles from a CDN."""
    client = api.client()
    for page in SCHEMA_PAGES:
        response = client.get(f"/schema{page}")
        assert response.status_code in {200, 404}, (page, response.status_code)
        if response.status_code == 200:
            assert "json" in response.headers["content-type"], page
        assert _EXTERNAL.search(response.text) is None, page
        assert "<script" not in response.text.lower(), page
    document = client.get("/schema").json()
    assert document["openapi"].startswith("3.")
    assert "/api/v1/jobs" in document["paths"]
