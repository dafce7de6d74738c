"""Schema-driven tests: Schemathesis generates requests from the app's own OpenAPI
document and sends them to the running server as an admin."""

from typing import TYPE_CHECKING, Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.result import Ok
from tests.integration.api.test_route_roles import STREAMS

from jobledger.api.openapi_links import STEPS
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

EXAMPLES_PER_OPERATION = 15


def test_no_server_errors_and_responses_match_the_schema(api: "Api") -> None:
    """If any request the schema allows (or nearly allows) is sent to any operation, then
    the server never answers 5xx, every status and body is documented, and requests
    that break the schema are refused."""
    schema = schemathesis.openapi.from_url(f"{api.url}/schema/openapi.json")
    headers = {"Authorization": f"Bearer {api.tokens[Role.ADMIN]}"}
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # an operation the document cannot describe
        if result.ok().path not in STREAMS:  # a stream never ends: its own tests cover it
            operations.append(result.ok())
    assert len(operations) > 30
    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(case=operation.as_strategy())
        def check(case: schemathesis.Case[Any]) -> None:
            # A schema cannot say which crons, zones or state changes are valid, so a
            # schema-valid body may still get a 409 or a 422 naming the rule.
            case.call_and_validate(
                base_url=api.url, headers=headers, excluded_checks=[positive_data_acceptance]
            )

        check()


def test_the_document_links_the_workflows(api: "Api") -> None:
    """If the OpenAPI document is read, then a created job links to its trigger, a run
    to its cancel and the dead-letter list to requeue, each link naming an operation and
    a path parameter that exist; Schemathesis builds its state machine from them."""
    document = httpx.get(f"{api.url}/schema/openapi.json").json()
    operations = {
        operation["operationId"]: (f"{method.upper()} {path}", operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    followed = set()
    for route, operation in operations.values():
        for status, answer in operation["responses"].items():
            for link in answer.get("links", {}).values():
                target, target_operation = operations[link["operationId"]]
                names = {p["name"] for p in target_operation.get("parameters", [])}
                assert set(link["parameters"]) <= names, (route, status, link)
                followed.add((route, target))
    assert {(step.source, step.target) for step in STEPS} <= followed
    assert ("POST /api/v1/jobs", "POST /api/v1/jobs/{job_id}/trigger") in followed
    assert ("GET /api/v1/dlq", "POST /api/v1/dlq/{execution_id}/requeue") in followed
    assert ("POST /api/v1/workflows", "GET /api/v1/workflows/{workflow_id}") in followed
    schemathesis.openapi.from_dict(document).as_state_machine()
