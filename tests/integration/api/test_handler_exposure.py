"""Which handlers the API lets a job name: the test handlers only when turned on."""

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from tests.integration.api.conftest import Api

from jobledger.domain.roles import Role

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_test_handlers_are_refused_in_production(
    api_with: Callable[..., AbstractContextManager[Api]],
) -> None:
    """If the API runs in production mode without JOBLEDGER_TEST_HANDLERS, then a run or
    a job naming test.crash (or any test.* handler) gets 422 naming the setting, and
    nothing is written."""
    with api_with(test_handlers="") as production:
        operator = production.client(Role.OPERATOR)
        head = production.container.head()
        requests = [
            ("/api/v1/executions", {"handler": "test.crash"}),
            ("/api/v1/executions", {"handler": "test.echo"}),
            ("/api/v1/jobs", {"name": "crash", "handler": "test.crash"}),
        ]
        for path, body in requests:
            response = operator.post(path, json=body)
            assert response.status_code == 422, response.text
            error = response.json()["error"]
            assert error["field"] == "handler"
            assert "JOBLEDGER_TEST_HANDLERS=true" in error["fix"]
        assert production.container.head() == head
        assert "test.crash" not in production.container.handlers().names()
