"""The API while a store cannot be reached: 503 with Retry-After, never 500."""

from typing import TYPE_CHECKING

import httpx

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api


def test_a_request_that_needs_redis_gets_503_while_it_is_unreachable(
    api_without_redis: "Api",
) -> None:
    """If Redis cannot be reached, then a route that needs it answers 503 with
    Retry-After and a message naming redis, routes that need only PostgreSQL still
    answer, and /ready answers 503 listing redis as unreachable."""
    viewer = api_without_redis.client(Role.VIEWER)
    workers = viewer.get("/api/v1/workers")
    assert workers.status_code == 503, workers.text
    assert int(workers.headers["Retry-After"]) >= 1
    error = workers.json()["error"]
    assert error["code"] == "unavailable"
    assert "redis" in error["message"]
    assert "retry" in error["fix"]
    assert viewer.get("/api/v1/jobs").status_code == 200
    created = viewer.get("/api/v1/metrics/system")
    assert created.status_code == 503, created.text

    ready = httpx.get(f"{api_without_redis.url}/ready", timeout=30)
    assert ready.status_code == 503, ready.text
    body = ready.json()
    assert body["unreachable"] == ["redis"]
    assert body["checks"]["store"]["ok"] is True
    assert body["checks"]["queue"]["detail"].startswith("redis unreachable: ConnectionError")
    assert list(api_without_redis.container.health.down()) == ["redis"]


def test_a_page_that_needs_redis_shows_an_error_page_while_it_is_unreachable(
    api_without_redis: "Api",
) -> None:
    """If Redis cannot be reached, then a dashboard page that needs it answers a browser
    with a 503 HTML page saying so (with Retry-After), not a JSON body or a 500."""
    browser = api_without_redis.session("viewer")
    page = browser.get("/ui/workers", headers={"Accept": "text/html"})
    assert page.status_code == 503, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert int(page.headers["Retry-After"]) >= 1
    assert "redis is unreachable" in page.text
