"""The caps on the number of queues and named limits, on every way in that creates one."""

import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pytest

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    import httpx
    from tests.integration.api.conftest import Api

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ApiWith = Callable[..., AbstractContextManager["Api"]]


def head(api: "Api") -> int:
    return api.container.ledger.recorder.max_notification_id() or 0


def run(client: "httpx.Client", queue: str) -> "httpx.Response":
    body = {"handler": "test.echo", "queue": queue}
    return client.post(
        "/api/v1/executions", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
    )


def refused(response: "httpx.Response", field: str, setting: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert setting in error["message"]
    assert setting in error["fix"]


def test_a_new_queue_past_the_cap_is_refused_on_every_way_in(api_with: ApiWith) -> None:
    """If two queues exist and the cap is 2, then a run, a batch, a job and a pause
    naming a third queue are each refused with 422 naming the field and
    JOBLEDGER_MAX_QUEUES, and nothing is written; the queues that exist take runs."""
    with api_with(max_queues="2") as api:
        operator = api.client(Role.OPERATOR)
        assert run(operator, "a").status_code == 202
        assert run(operator, "b").status_code == 202
        api.wait_for(lambda: api.container.queue.queues() >= {"a", "b"})
        before = head(api)
        setting = "JOBLEDGER_MAX_QUEUES"
        refused(run(operator, "c"), "queue", setting)
        batch: dict[str, Any] = {
            "runs": [
                {"handler": "test.echo", "queue": "a", "key": "k1"},
                {"handler": "test.echo", "queue": "c", "key": "k2"},
            ]
        }
        refused(operator.post("/api/v1/executions:batch", json=batch), "runs[1].queue", setting)
        job = {"name": "j", "handler": "test.echo", "queue": "c", "schedule": {"kind": "manual"}}
        refused(operator.post("/api/v1/jobs", json=job), "queue", setting)
        pause = operator.post("/api/v1/queues/c/pause", json={"reason": "why"})
        refused(pause, "name", setting)
        assert head(api) == before
        assert run(operator, "a").status_code == 202
        assert operator.post("/api/v1/queues/b/pause", json={"reason": "x"}).status_code == 200


def test_a_named_limit_past_the_cap_is_refused_until_one_is_deleted(api_with: ApiWith) -> None:
    """If two named limits exist and the cap is 2, then a third is refused with 422
    naming JOBLEDGER_MAX_NAMED_LIMITS and nothing is written; changing one that exists
    is not refused, and after one is deleted the third can be created."""
    with api_with(max_named_limits="2") as api:
        operator = api.client(Role.OPERATOR)
        for name in ("a", "b"):
            made = operator.post("/api/v1/limits", json={"name": name, "concurrency": 1})
            assert made.status_code == 201, made.text
        api.wait_for(lambda: set(api.container.queue.named_limits()) == {"a", "b"})
        before = head(api)
        third = operator.post("/api/v1/limits", json={"name": "c", "concurrency": 1})
        refused(third, "name", "JOBLEDGER_MAX_NAMED_LIMITS")
        assert head(api) == before
        assert operator.put("/api/v1/limits/a", json={"concurrency": 3}).status_code == 200
        assert operator.delete("/api/v1/limits/a").status_code == 200
        api.wait_for(lambda: set(api.container.queue.named_limits()) == {"b"})
        again = operator.post("/api/v1/limits", json={"name": "c", "concurrency": 1})
        assert again.status_code == 201, again.text
