"""Well-formed input the stores cannot carry, or that sits at the edges of the calendar,
gets a 4xx naming the field over real HTTP, and writes nothing to the log."""

import re
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import pytest

from jobledger.bootstrap import web_app
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

JOB: dict[str, Any] = {"name": "limits", "handler": "test.echo"}
LATE = "9999-12-31T23:59:59-14:00"
EARLY = "0001-01-01T00:00:00+14:00"
DEEP = 100_000


def deep_array(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def once(run_at: str) -> dict[str, Any]:
    return {**JOB, "schedule": {"kind": "once", "run_at": run_at}}


def cron(expression: str, zone: str = "UTC") -> dict[str, Any]:
    return {**JOB, "schedule": {"kind": "cron", "cron": expression, "timezone": zone}}


def preview(after: str | None = None, **schedule: str) -> dict[str, Any]:
    body: dict[str, Any] = {"schedule": {"kind": "cron", "cron": "0 * * * *", **schedule}}
    return body | ({"after": after} if after else {})


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def encoded(value: Any) -> bytes:
    return msgspec.json.encode(value)


# (method and path, body, expected status, the field the error names)
BAD: list[Any] = [
    pytest.param(
        "POST /api/v1/executions",
        {"handler": "test.echo", "payload": {"big": 1208925819614629174706176}},
        422,
        "payload.big",
        id="adhoc-int-past-64-bits",
    ),
    pytest.param(
        "POST /api/v1/executions",
        {"handler": "test.echo", "payload": {"n": -(2**63) - 1}},
        422,
        "payload.n",
        id="adhoc-int-below-64-bits",
    ),
    pytest.param(
        "POST /api/v1/executions",
        {"handler": "test.echo", "payload": {"a": [1, {"b": "x\x00y"}]}},
        422,
        "payload.a[1].b",
        id="adhoc-nul-in-nested-string",
    ),
    pytest.param(
        "POST /api/v1/executions",
        {"handler": "test.echo", "payload": {"a": {"k\x00": 1}}},
        422,
        'payload.a["k\\u0000"] (key)',
        id="adhoc-nul-in-key",
    ),
    pytest.param(
        "POST /api/v1/executions",
        {"handler": "test.echo", "payload": {"k" * 300: 1}},
        422,
        f"payload.{'k' * 300} (key)",
        id="adhoc-long-key",
    ),
    pytest.param(
        "POST /api/v1/executions",
        {"handler": "test.echo", "payload": nested(33)},
        422,
        "payload" + ".a" * 32,
        id="adhoc-nested-33",
    ),
    pytest.param(
        "POST /api/v1/executions",
        b'{"handler": "test.echo", "payload": {"n": 1e400}}',
        400,
        "body",
        id="adhoc-float-overflow",
    ),
    pytest.param(
        "POST /api/v1/jobs", {**JOB, "payload": {"big": 2**64}}, 422, "payload.big", id="job-int"
    ),
    pytest.param(
        "POST /api/v1/jobs",
        {**JOB, "description": "a\x00b"},
        400,
        "description",
        id="job-nul-description",
    ),
    pytest.param("POST /api/v1/jobs", once(LATE), 422, "schedule.run_at", id="run-at-late"),
    pytest.param("POST /api/v1/jobs", once(EARLY), 422, "schedule.run_at", id="run-at-early"),
    pytest.param(
        "POST /api/v1/jobs", cron("0 * * * *", "localtime"), 422, "schedule.timezone", id="tz-lt"
    ),
    pytest.param(
        "POST /api/v1/jobs", cron("0 * * * *", "Factory"), 422, "schedule.timezone", id="tz-fa"
    ),
    pytest.param(
        "POST /api/v1/jobs",
        cron("0 * * * *", "posixrules"),
        422,
        "schedule.timezone",
        id="tz-posixrules",
    ),
    pytest.param("POST /api/v1/jobs", cron("*/0 * * * *"), 422, "schedule.cron", id="step-0"),
    pytest.param(
        "POST /api/v1/jobs", cron("*/1000000 * * * *"), 422, "schedule.cron", id="step-huge"
    ),
    pytest.param("POST /api/v1/jobs", cron("0 */24 * * *"), 422, "schedule.cron", id="step-24"),
    pytest.param("POST /api/v1/jobs", deep_array(DEEP), 400, "body", id="job-deep-array"),
    pytest.param(
        "POST /api/v1/executions",
        b'{"handler": "test.echo", "payload": {"a": ' + deep_array(DEEP) + b"}}",
        400,
        "body",
        id="adhoc-deep-payload",
    ),
    pytest.param(
        "POST /api/v1/schedules/preview",
        preview("9999-12-31T23:00:00Z"),
        422,
        "after",
        id="preview-after-9999",
    ),
    pytest.param(
        "POST /api/v1/schedules/preview",
        preview("0001-01-01T00:00:00Z"),
        422,
        "after",
        id="preview-after-year-1",
    ),
    pytest.param(
        "POST /api/v1/schedules/preview",
        preview(timezone="localtime"),
        422,
        "schedule.timezone",
        id="preview-localtime",
    ),
    pytest.param(
        "POST /api/v1/schedules/preview",
        {"schedule": {"kind": "once", "run_at": LATE}},
        422,
        "schedule.run_at",
        id="preview-once-late",
    ),
    pytest.param(
        "POST /api/v1/schedules/preview",
        deep_array(DEEP),
        400,
        "body",
        id="preview-deep-array",
    ),
]


def send(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    if body is None:
        return client.request(method, path.replace("+", "%2B"))
    content = body if isinstance(body, bytes) else encoded(body)
    return client.request(
        method, path, content=content, headers={"Content-Type": "application/json"}
    )


@pytest.mark.parametrize(("route", "body", "status", "field"), BAD)
def test_input_past_the_limits_is_refused_naming_the_field(
    module_api: "Api", route: str, body: Any, status: int, field: str
) -> None:
    """If a request carries a value the stores cannot hold or the calendar cannot reach,
    then the answer is that 4xx with the field and a fix, and the log is unchanged."""
    client = module_api.client(Role.OPERATOR)
    before = module_api.container.head()
    method, path = route.split(" ", 1)
    response = send(client, method, path, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert error["fix"], error
    assert field in error["message"]
    assert module_api.container.head() == before


def test_edge_times_and_versions_in_queries_are_never_a_server_error(module_api: "Api") -> None:
    """If ``as_of`` names a version past 64 bits or a time at either edge of the
    calendar, or a list filter does, then the answer is not a server error."""
    operator = module_api.client(Role.OPERATOR)
    created = operator.post("/api/v1/jobs", json={**JOB, "name": "as of"})
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    answers = {}
    for as_of in ("9" * 40, "0", EARLY, LATE):
        answers[as_of] = operator.get(f"/api/v1/jobs/{job_id}", params={"as_of": as_of})
    for name in ("since", "until"):
        for moment in (EARLY, LATE):
            answers[f"{name}={moment}"] = operator.get("/api/v1/executions", params={name: moment})
    assert all(r.status_code < 500 for r in answers.values()), answers
    for version in ("9" * 40, "0"):
        assert answers[version].status_code == 400, answers[version].text
        assert answers[version].json()["error"]["field"] == "as_of"


def test_the_same_limits_hold_for_a_job_update(module_api: "Api") -> None:
    """If a job update carries a payload past the limits, then it is refused with the
    path and the job keeps its version."""
    operator = module_api.client(Role.OPERATOR)
    created = operator.post("/api/v1/jobs", json={**JOB, "name": "patched"}).json()
    response = operator.patch(f"/api/v1/jobs/{created['id']}", json={"payload": {"x": [2**63]}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "payload.x[0]"
    assert operator.get(f"/api/v1/jobs/{created['id']}").json()["version"] == created["version"]


def wrong_type(schema: dict[str, Any]) -> Any:
    """A value of another JSON type than the field takes."""
    return 5 if schema.get("type") == "array" else [""]


def body_fields_named_like_dependencies(
    document: dict[str, Any], names: set[str]
) -> list[tuple[str, str, str]]:
    """(method, path, field) for each request-body field that shares a dependency's name."""
    schemas = document["components"]["schemas"]
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            reference = (
                operation.get("requestBody", {})
                .get("content", {})
                .get("application/json", {})
                .get("schema", {})
                .get("$ref", "")
            )
            properties = schemas.get(reference.rpartition("/")[2], {}).get("properties", {})
            found += [(method.upper(), path, name) for name in properties if name in names]
    return found


def test_a_body_field_named_like_a_dependency_is_the_clients_mistake(
    module_api: "Api",
) -> None:
    """If a body field that shares its name with a dependency the routes are given
    (``limits``, ``jobs``) has the wrong type, then the answer is a 400 naming that
    field, not a server error, and the log is unchanged."""
    client = module_api.client(Role.ADMIN)
    document = client.get("/schema/openapi.json").json()
    names = set(web_app(module_api.container).dependencies)
    cases = body_fields_named_like_dependencies(document, names)
    assert {("POST", "/api/v1/executions", "limits"), ("POST", "/api/v1/jobs", "limits")} <= {
        *cases
    }, cases
    schemas = document["components"]["schemas"]
    before = module_api.container.head()
    for method, path, name in cases:
        concrete = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
        ref = document["paths"][path][method.lower()]["requestBody"]["content"]
        schema = schemas[ref["application/json"]["schema"]["$ref"].rpartition("/")[2]]
        value = wrong_type(schema["properties"][name])
        response = send(client, method, concrete, {name: value})
        assert response.status_code == 400, (method, path, response.text)
        error = response.json()["error"]
        assert error["field"] == name, (method, path, error)
        assert error["fix"], error
    assert module_api.container.head() == before
