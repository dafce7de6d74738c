"""Limits over HTTP: runs that carry them, named limits, their use, and refusals."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from jobledger.domain.limits import Limit, limit_id
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    import httpx
    from tests.integration.api.conftest import Api

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

Q = "billing"
TTL = timedelta(seconds=30)


def run(client: "httpx.Client", customer: str, **limits: Any) -> "httpx.Response":
    body = {
        "handler": "test.echo",
        "queue": Q,
        "payload": {"customer": customer},
        "limits": limits,
    }
    return client.post(
        "/api/v1/executions", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
    )


def listed(client: "httpx.Client") -> dict[str, Any]:
    response = client.get("/api/v1/limits")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def lease_all(api: "Api") -> int:
    """Lease what the queue lets lease now (as a worker would)."""
    ids = [uuid.uuid4() for _ in range(20)]
    now = datetime.now(UTC)
    return len(api.container.queue.lease_round(Q, lease_ids=ids, ttl=TTL, now=now).leases)


def held_runs(api: "Api", operator: "httpx.Client", *, most: int, runs: int) -> None:
    """A named limit smtp of ``most`` at once, and ``runs`` runs naming its key."""
    assert operator.post("/api/v1/limits", json={"name": "smtp", "concurrency": most}).is_success
    for n in range(runs):
        assert run(operator, f"c{n}", concurrency={"key": "smtp"}).status_code == 202
    api.wait_for(lambda: api.container.queue.named_limits().get("smtp") is not None)
    api.wait_for(lambda: api.container.queue.depths(Q, now=datetime.now(UTC)).ready == runs)


def leased_in_rounds(api: "Api", count: int) -> None:
    """Lease rounds until ``count`` runs leased in all (a change of the named limits
    reaches the lease step within a second)."""
    leased = 0

    def more() -> bool:
        nonlocal leased
        leased += lease_all(api)
        return leased == count

    api.wait_for(more)


def test_runs_with_a_templated_key_wait_and_the_list_shows_it(api: "Api") -> None:
    """If three runs of one customer carry concurrency 1 keyed by their payload, then
    the first leases, the others wait, and the list shows the key of that customer with
    1 in use and 2 waiting; the run's history keeps the resolved key."""
    operator, viewer = api.client(Role.OPERATOR), api.client(Role.VIEWER)
    concurrency = {"key": "customer:{payload.customer}", "max": 1}
    made = [run(operator, "c-7", concurrency=concurrency) for _ in range(3)]
    assert [r.status_code for r in made] == [202, 202, 202], made[0].text
    api.wait_for(lambda: api.container.queue.depths(Q, now=datetime.now(UTC)).ready == 3)
    assert lease_all(api) == 1
    keys = listed(viewer)["keys"]
    assert keys == [
        {
            "queue": Q,
            "kind": "concurrency",
            "key": "customer:c-7",
            "in_use": 1,
            "waiting": 2,
            "allowed": 1,
        }
    ]
    execution = api.container.ledger.get_execution(uuid.UUID(made[0].json()["id"]))
    assert execution.spec.limits is not None
    assert execution.spec.limits.concurrency is not None
    assert execution.spec.limits.concurrency.key == "customer:c-7"


def test_a_named_limit_is_created_changed_and_listed(api: "Api") -> None:
    """If an operator creates a named limit, then a second create is 409, a change
    with the same values changes nothing, new values are recorded, and the list and
    the detail show them."""
    operator, viewer = api.client(Role.OPERATOR), api.client(Role.VIEWER)
    created = operator.post(
        "/api/v1/limits", json={"name": "stripe", "rate": 100, "per_seconds": 60}
    )
    assert created.status_code == 201, created.text
    assert created.json()["limit"]["rate"] == 100
    again = operator.post("/api/v1/limits", json={"name": "stripe", "concurrency": 3})
    assert again.status_code == 409, again.text
    assert "PUT /api/v1/limits/stripe" in again.text
    same = operator.put("/api/v1/limits/stripe", json={"rate": 100, "per_seconds": 60})
    assert same.json()["changed"] is False
    changed = operator.put("/api/v1/limits/stripe", json={"concurrency": 5})
    assert changed.status_code == 200, changed.text
    assert changed.json()["changed"] is True
    detail = viewer.get("/api/v1/limits/stripe").json()
    assert (detail["concurrency"], detail["rate"], detail["version"]) == (5, None, 2)
    api.wait_for(lambda: [row["name"] for row in listed(viewer)["limits"]] == ["stripe"])
    limit = api.container.ledger.limit(limit_id("stripe"))
    assert isinstance(limit, Limit)
    assert limit.values.concurrency == 5


def test_a_named_limit_holds_runs_that_name_its_key(api: "Api") -> None:
    """If a named limit allows 2 at once, then runs naming its key without values
    lease two at a time."""
    held_runs(api, api.client(Role.OPERATOR), most=2, runs=4)
    # The queue reads named limits again within a second.
    api.wait_for(lambda: lease_all(api) == 2)
    assert lease_all(api) == 0


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        (
            {"concurrency": {"key": "customer:{payload.missing}", "max": 1}},
            "limits.concurrency.key",
        ),
        ({"concurrency": {"key": "k", "max": 0}}, "limits.concurrency.max"),
        ({"rate": {"key": "k", "limit": 5}}, "limits.rate"),
        ({"rate": {"key": "k\u0001", "limit": 5, "per_seconds": 10}}, "limits.rate.key"),
        ({}, "limits"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_field(
    api: "Api", limits: dict[str, Any], field: str
) -> None:
    """If a run's limits cannot be enforced, then it gets 4xx naming the field, and no
    run is written."""
    operator = api.client(Role.OPERATOR)
    before = api.container.ledger.recorder.max_notification_id()
    response = run(operator, "c1", **limits)
    assert response.status_code in {400, 422}, response.text
    assert field in response.text
    assert api.container.ledger.recorder.max_notification_id() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x"}, "limit"),
        ({"name": "x", "rate": 3}, "rate"),
        ({"name": "x", "concurrency": -1}, "concurrency"),
        ({"name": "{payload.a}", "concurrency": 1}, "name"),
        ({"name": "", "concurrency": 1}, "name"),
        ({"name": "api/stripe", "concurrency": 1}, "name"),
    ],
)
def test_a_bad_named_limit_is_refused(api: "Api", body: dict[str, Any], field: str) -> None:
    """If a named limit limits nothing or is malformed, then it gets 4xx naming what."""
    response = api.client(Role.OPERATOR).post("/api/v1/limits", json=body)
    assert response.status_code in {400, 422}, response.text
    assert field in response.text


def test_a_viewer_cannot_create_or_change_a_limit(api: "Api") -> None:
    """If a viewer creates or changes a limit, then it gets 403 and nothing is written."""
    viewer = api.client(Role.VIEWER)
    assert viewer.post("/api/v1/limits", json={"name": "a", "concurrency": 1}).status_code == 403
    assert viewer.put("/api/v1/limits/a", json={"concurrency": 1}).status_code == 403
    assert api.container.ledger.limit(limit_id("a")) is None


def test_changing_an_unknown_limit_is_404(api: "Api") -> None:
    """If an operator changes a limit nobody created, then 404 says how to create it."""
    response = api.client(Role.OPERATOR).put("/api/v1/limits/nope", json={"concurrency": 1})
    assert response.status_code == 404, response.text
    assert "POST /api/v1/limits" in response.text


@pytest.mark.parametrize(
    "name", ["api\u202estripe", "api\u200dstripe", "\u2066api\u2069", "api\ufeff", "ap\u0456"]
)
def test_a_limit_name_with_format_characters_is_refused(api: "Api", name: str) -> None:
    """If a named limit's name holds a bidi override, a zero-width or other format
    character (Unicode Cf), or a look-alike letter, then it is refused naming ``name``,
    as a job's name is, and no limit is made."""
    operator = api.client(Role.OPERATOR)
    made = operator.post("/api/v1/limits", json={"name": name, "concurrency": 1})
    assert made.status_code == 422, made.text
    assert made.json()["error"]["field"] == "name"
    job = operator.post(
        "/api/v1/jobs",
        json={"name": name, "handler": "test.echo", "schedule": {"kind": "manual"}},
    )
    assert job.status_code == 422, job.text
    assert made.json()["error"]["fix"] == job.json()["error"]["fix"]
    assert operator.get("/api/v1/limits").json()["limits"] == []


def test_a_deleted_limit_is_gone_and_no_longer_holds_runs(api: "Api") -> None:
    """If an operator deletes a named limit of 1 while runs naming its key wait, then
    it answers 200, the list and the detail no longer show it, and the waiting runs
    lease; a viewer's delete is 403 and an unknown name 404, both writing nothing."""
    operator, viewer = api.client(Role.OPERATOR), api.client(Role.VIEWER)
    held_runs(api, operator, most=1, runs=3)
    leased_in_rounds(api, 1)
    before = api.container.ledger.recorder.max_notification_id()
    assert viewer.delete("/api/v1/limits/smtp").status_code == 403
    assert operator.delete("/api/v1/limits/nope").status_code == 404
    assert api.container.ledger.recorder.max_notification_id() == before

    deleted = operator.delete("/api/v1/limits/smtp")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["changed"] is True
    api.wait_for(lambda: listed(viewer)["limits"] == [])
    assert viewer.get("/api/v1/limits/smtp").status_code == 404
    leased_in_rounds(api, 2)
    assert operator.delete("/api/v1/limits/smtp").status_code == 404
