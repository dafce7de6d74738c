"""A run's start-by deadline (``expires_at``) over real HTTP on PostgreSQL: taken by a
run and by a batch, kept in the run's spec, refused with a 422 naming it when it
could never be met, and through the client."""

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from jobledger.client import Client
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

BATCH = "/api/v1/executions:batch"


def _head(api: "Api") -> int:
    return api.container.ledger.recorder.max_notification_id() or 0


def test_a_run_and_a_batch_keep_their_expires_at(api: "Api") -> None:
    """If a run or a batch's run is sent with expires_at, then the run's spec holds it
    (the worker that leases it later discards it unrun)."""
    client = api.client(Role.OPERATOR)
    deadline = (datetime.now(tz=UTC) + timedelta(hours=1)).replace(microsecond=0)
    body = {"handler": "test.echo", "expires_at": deadline.isoformat()}
    one = client.post("/api/v1/executions", json=body)
    assert one.status_code == 202, one.text
    batch = client.post(BATCH, json={"runs": [{"handler": "test.echo"}, body]})
    assert batch.status_code == 202, batch.text
    ledger = api.container.ledger
    assert ledger.get_execution(one.json()["id"]).spec.expires_at == deadline
    first, second = (ref["id"] for ref in batch.json()["executions"])
    assert ledger.get_execution(first).spec.expires_at is None
    assert ledger.get_execution(second).spec.expires_at == deadline


def test_an_expires_at_that_could_never_be_met_is_refused(api: "Api") -> None:
    """If expires_at is not after the run is due (in the past, or before its run_at),
    or has no time zone, then the answer is 4xx naming expires_at with a fix, for a
    run and for a batch's run, and nothing is written."""
    client = api.client(Role.OPERATOR)
    now = datetime.now(tz=UTC)
    head = _head(api)
    cases = [
        {"expires_at": (now - timedelta(minutes=1)).isoformat()},
        {
            "run_at": (now + timedelta(hours=2)).isoformat(),
            "expires_at": (now + timedelta(hours=1)).isoformat(),
        },
        {"expires_at": "2030-01-01T00:00:00"},
    ]
    for case in cases:
        body = {"handler": "test.echo", **case}
        refused = client.post("/api/v1/executions", json=body)
        assert refused.status_code in (400, 422), refused.text
        error = refused.json()["error"]
        assert "expires_at" in str(error["field"]), error
        assert error["fix"]
        in_batch = client.post(BATCH, json={"runs": [{"handler": "test.echo"}, body]})
        assert in_batch.status_code in (400, 422), in_batch.text
        assert "expires_at" in str(in_batch.json()["error"]["field"]), in_batch.text
    assert _head(api) == head


def test_the_client_sends_expires_at(api: "Api") -> None:
    """If the client enqueues a run with expires_at, then the run's spec holds it."""
    deadline = (datetime.now(tz=UTC) + timedelta(minutes=10)).replace(microsecond=0)
    with Client(api.url, api.tokens[Role.OPERATOR], backoff=0.01) as client:
        ref = client.enqueue("test.echo", {"n": 1}, expires_at=deadline)
    assert api.container.ledger.get_execution(ref.id).spec.expires_at == deadline
