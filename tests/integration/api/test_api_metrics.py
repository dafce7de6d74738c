"""The API's /metrics: HTTP requests by route template and status, and refused sign-ins."""

from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

Samples = list[tuple[str, dict[str, str], float]]


def parse(text: str) -> Samples:
    families = text_string_to_metric_families(text)
    return [(s.name, s.labels, s.value) for family in families for s in family.samples]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples that carry ``labels``."""
    wanted = labels.items()
    return sum(v for n, ls, v in samples if n == name and wanted <= ls.items())


def test_requests_and_login_failures_are_counted(api: "Api") -> None:
    """If clients make requests, some refused, and sign in with a wrong password, then
    /metrics counts the requests by method, route template and status, and the
    failed sign-ins."""
    viewer = api.client(Role.VIEWER)
    assert viewer.get("/api/v1/jobs").status_code == 200
    anonymous = api.client()
    assert anonymous.get("/api/v1/jobs").status_code == 401
    for _ in range(2):
        response = anonymous.post(
            "/api/v1/auth/login", json={"username": "viewer", "password": "wrong"}
        )
        assert response.status_code == 401
    samples = parse(anonymous.get("/metrics").text)
    requests = "jobledger_http_requests_total"
    assert total(samples, requests, method="GET", route="/api/v1/jobs", status="200") == 1
    assert total(samples, requests, method="GET", route="/api/v1/jobs", status="401") == 1
    assert total(samples, requests, method="POST", route="/api/v1/auth/login", status="401") == 2
    latency = "jobledger_http_request_duration_seconds_count"
    assert total(samples, latency, route="/api/v1/jobs") == 2
    assert total(samples, "jobledger_login_failures_total", reason="credentials") == 2
