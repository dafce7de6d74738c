"""Handlers declared in code, as the API sees them: listed with their payload schema,
and a payload their struct refuses is refused when a job or run is created."""

import html
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from tests.integration.api.conftest import serve_api

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api

CODE_JOBS = "tests.integration.code_jobs"
JOB = {
    "name": "invoice acme",
    "handler": "billing.send_invoice",
    "payload": {"customer": "acme", "amount": 120},
}


@pytest.fixture(scope="module")
def code_api(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    """One API for the module, with the handlers of a jobs module."""
    with serve_api(module_postgres_url, redis_server, live_server, handlers=CODE_JOBS) as served:
        yield served


def test_the_handlers_are_listed_with_their_payload_schema(code_api: "Api") -> None:
    """If the handlers are listed, then a declared one has its description and the JSON
    schema of its payload struct; one that declares none has no schema."""
    listed = {h["name"]: h for h in code_api.client(Role.VIEWER).get("/api/v1/handlers").json()}
    invoice = listed["billing.send_invoice"]
    assert invoice["description"] == "Sends one invoice."
    fields = invoice["payload_schema"]["$defs"]["Invoice"]
    assert fields["required"] == ["customer", "amount"]
    assert fields["properties"]["amount"] == {"type": "integer"}
    assert listed["tests.block"]["payload_schema"] is None
    assert listed["http.webhook"]["description"].startswith("Calls an http(s) URL")


@pytest.mark.parametrize(
    ("payload", "field", "problem"),
    [
        ({"customer": "acme", "amount": "ten"}, "payload.amount", "Expected `int`, got `str`"),
        ({"amount": 3}, "payload.customer", "missing required field `customer`"),
    ],
)
def test_a_payload_the_handler_refuses_is_refused_at_creation(
    code_api: "Api", payload: dict[str, object], field: str, problem: str
) -> None:
    """If a job or an ad-hoc run is created (or a job changed) with a payload the
    handler's declared struct refuses, then it is a 422 naming the payload's field, and
    nothing is written to the log."""
    operator = code_api.client(Role.OPERATOR)
    head = code_api.container.head()
    for method, path, body in (
        ("POST", "/api/v1/jobs", {**JOB, "payload": payload}),
        ("POST", "/api/v1/executions", {"handler": "billing.send_invoice", "payload": payload}),
    ):
        refused = operator.request(method, path, json=body)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["field"] == field
        assert problem in error["message"]
        assert "GET /api/v1/handlers" in error["fix"]
    assert code_api.container.head() == head
    created = operator.post("/api/v1/jobs", json=JOB)
    assert created.status_code == 201, created.text
    patched = operator.patch(f"/api/v1/jobs/{created.json()['id']}", json={"payload": payload})
    assert (patched.status_code, patched.json()["error"]["field"]) == (422, field)


def test_the_job_form_hints_at_the_payload_a_handler_declares(code_api: "Api") -> None:
    """If an operator opens the new-job form, then each handler that declares a payload
    has a hint naming its fields, their types and which are required."""
    browser = code_api.session("operator")
    page = html.unescape(browser.get("/ui/jobs/new").text)
    assert (
        "billing.send_invoice takes customer: string, required; amount: integer, required;"
        ' currency: string = "EUR"'
    ) in page
