"""Schema-driven tests: Schemathesis generates requests from the app's own OpenAPI
document and sends them to the running server as an admin."""

from typing import TYPE_CHECKING, Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.result import Ok

from jobledger.runtime.accounts import Role

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
