"""The fuzz campaign over a live API (see ``fuzz_campaign``): generated requests as each
role, inputs at the codec's edges, and the followers after them. It prints how many
inputs each part tried; ``python -m bench.fuzz`` runs it for longer."""

from typing import TYPE_CHECKING, Any

import pytest
from tests.integration.api.fuzz_campaign import (
    Budget,
    campaign_target,
    run_campaign,
    usual_payloads,
)

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.conftest import JsonValues, LiveServer
    from tests.integration.api.conftest import Api

# About 40 s on two loaded cores, most of it the stateful scenarios and the runs
# (``python -m bench.fuzz`` tries many more of each).
BUDGET = Budget(scenarios=10, steps=15, definitions=100, runs=24, bursts=1)
# Violations counted but not failed on here, each with a test of its own below.
KNOWN: frozenset[str] = frozenset()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_campaign_finds_no_violation(
    api: "Api",
    json_values: type["JsonValues"],
    live_server: type["LiveServer"],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """If requests are generated from the OpenAPI links as a viewer, an operator and an
    admin, and definitions at the codec's edges are posted, then none gets a 5xx or
    crashes the server, a role below the route's gets 403, every refusal has the error
    shape and writes nothing, every accepted input reads back as sent, and afterwards
    the projections catch up, /ready answers 200 and nothing is quarantined."""
    target = campaign_target(api.container, api.url, api.tokens)
    try:
        payloads = usual_payloads(json_values)
        outcome = run_campaign(api.container, target, payloads, BUDGET, live_server)
    finally:
        target.probe.close()
    with capsys.disabled():
        print(f"\nfuzz campaign:\n{outcome.summary()}")  # noqa: T201 (the counts are its report)
    for role in Role:
        stateful = outcome.tally("stateful", str(role))
        assert stateful.cases >= BUDGET.scenarios, stateful
        assert stateful.links, f"{role} followed no link"
    assert outcome.tally("definitions", str(Role.OPERATOR)).cases >= BUDGET.definitions
    assert outcome.tally("runs", str(Role.OPERATOR)).cases >= BUDGET.runs
    assert outcome.tally("runs", "outbox").cases, "no outbox row was tried"
    refused = outcome.tally("budgets", str(Role.OPERATOR)).statuses[429]
    assert refused, "the small budgets refused no run-creating request"
    assert outcome.count(besides=KNOWN) == 0, "\n".join(outcome.violations(besides=KNOWN))


LOOSE: list[Any] = [
    pytest.param({"priority": "5"}, "priority", id="int-as-text"),
    pytest.param({"timeout_seconds": "30"}, "timeout_seconds", id="float-as-text"),
    pytest.param({"retry": {"jitter": 1}}, "retry.jitter", id="flag-as-number"),
    pytest.param({"retry": {"jitter": "false"}}, "retry.jitter", id="flag-as-text"),
]


@pytest.mark.parametrize(("fields", "field"), LOOSE)
def test_numbers_and_flags_sent_as_another_type_are_refused(
    module_api: "Api", fields: dict[str, Any], field: str
) -> None:
    """If a job's number is sent as text, or its flag as a number, then it is refused
    with 400 naming the field, as any other value of the wrong type is."""
    operator = module_api.client(Role.OPERATOR)
    body = {"name": "loose", "handler": "test.echo"} | fields
    response = operator.post("/api/v1/jobs", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == field


def test_a_deleted_job_previews_no_fires(module_api: "Api") -> None:
    """If a job is deleted, then its preview lists no fires, as its next fire is none:
    a deleted job stops firing."""
    operator = module_api.client(Role.OPERATOR)
    body = {"name": "gone", "handler": "test.echo"}
    created = operator.post(
        "/api/v1/jobs", json=body | {"schedule": {"kind": "cron", "cron": "0 * * * *"}}
    )
    assert created.status_code == 201, created.text
    job = operator.delete(f"/api/v1/jobs/{created.json()['id']}").json()
    assert job["next_fire_at"] is None
    preview = operator.get(f"/api/v1/jobs/{job['id']}/preview")
    assert preview.status_code == 200, preview.text
    assert preview.json()["fires"] == []


@pytest.mark.parametrize("name", ["since", "until"])
def test_a_time_sent_as_a_number_is_refused(module_api: "Api", name: str) -> None:
    """If a list's time filter is a bare number, then it is refused with 400 naming the
    filter, as a time without its offset is."""
    response = module_api.client(Role.VIEWER).get("/api/v1/executions", params={name: "1700000000"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == name


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"username": "A", "password": "correct horse battery staple"}, "username"),
        pytest.param({"username": "someone", "password": "short"}, "password"),
    ],
)
def test_a_refused_account_names_the_field_and_the_fix(
    module_api: "Api", body: dict[str, str], field: str
) -> None:
    """If a new user's name or password breaks a rule, then the 422 names the field and
    the fix, as every other refused input does."""
    response = module_api.client(Role.ADMIN).post("/api/v1/users", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error.get("field") == field, error
    assert error.get("fix"), error


def test_a_misspelt_filter_is_refused(module_api: "Api") -> None:
    """If a list is asked for with a filter it does not take (a typo), then it is refused
    with 400 naming it, as an unknown field of a body is, instead of listing all."""
    response = module_api.client(Role.VIEWER).get("/api/v1/executions", params={"stauts": "failed"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == "stauts"


@pytest.mark.parametrize(
    "route", ["/api/v1/executions", "/api/v1/executions:batch", "/api/v1/jobs"]
)
@pytest.mark.parametrize("body", [b"null", b"[]", b"0", b'"x"'])
def test_a_body_that_is_no_object_is_refused_naming_the_body(
    module_api: "Api", route: str, body: bytes
) -> None:
    """If a request's body is JSON but not an object (null, an array, a number, a
    string), then the 400 names the body as its field, as every refused input names
    one, and nothing is written."""
    head = module_api.container.head()
    response = module_api.client(Role.OPERATOR).post(
        route, content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"].get("field") == "body", response.text
    assert module_api.container.head() == head
