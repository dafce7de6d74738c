"""``POST /api/v1/executions:batch`` (many ad-hoc runs in one request and one
transaction) and unique runs, over real HTTP on PostgreSQL."""

import threading
import uuid
from typing import TYPE_CHECKING, Any

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

BATCH = "/api/v1/executions:batch"


def _head(api: "Api") -> int:
    return api.container.ledger.recorder.max_notification_id() or 0


def _runs(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"handler": "test.echo", "payload": {"n": n}} | extra for n in range(count)]


def test_a_batch_enqueues_every_run_once_and_again_returns_them(api: "Api") -> None:
    """If 250 runs are posted in one batch, then each is in the log once, in the
    batch's order, due at once; the same batch sent again with its Idempotency-Key
    returns the same runs as existing and writes nothing."""
    client = api.client(Role.OPERATOR)
    runs = [*_runs(249), {"handler": "test.echo", "key": "mine", "delay_seconds": 60}]
    headers = {"Idempotency-Key": "batch-1"}
    first = client.post(BATCH, json={"runs": runs}, headers=headers)
    assert first.status_code == 202, first.text
    body = first.json()
    assert (body["created"], body["existing"]) == (250, 0)
    ids = [ref["id"] for ref in body["executions"]]
    assert len(set(ids)) == 250
    assert {ref["status"] for ref in body["executions"]} == {"pending"}
    ledger = api.container.ledger
    assert ledger.get_execution(ids[7]).spec.payload == {"n": 7}
    delayed = ledger.get_execution(ids[-1])
    assert (delayed.ready_at - delayed.created_on).total_seconds() >= 59
    head = _head(api)
    again = client.post(BATCH, json={"runs": runs}, headers=headers)
    assert again.status_code == 202, again.text
    assert (again.json()["created"], again.json()["existing"]) == (0, 250)
    assert [ref["id"] for ref in again.json()["executions"]] == ids
    assert _head(api) == head
    one = client.post("/api/v1/executions", json=runs[3], headers={"Idempotency-Key": "batch-1:3"})
    assert one.json()["id"] == ids[3]  # a run's key is the batch's key and its index


def test_a_batch_with_one_bad_run_writes_nothing_and_names_it(api: "Api") -> None:
    """If one run of a batch is refused (an unknown handler, a payload the codec
    cannot carry, both run_at and delay_seconds, a key given twice), then the answer
    is 422 naming ``runs[i]`` and its field, and the log holds none of the batch."""
    client = api.client(Role.OPERATOR)
    head = _head(api)
    cases = [
        ({"handler": "no.such"}, "runs[2].handler"),
        ({"handler": "test.echo", "payload": {"big": 2**70}}, "runs[2].payload"),
        (
            {"handler": "test.echo", "run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5},
            "runs[2].delay_seconds",
        ),
    ]
    for bad, field in cases:
        refused = client.post(BATCH, json={"runs": [*_runs(2), bad, *_runs(2)]})
        assert refused.status_code in (400, 422), refused.text
        error = refused.json()["error"]
        assert str(error["field"]).replace("$.", "").startswith(field), error
        assert error["fix"]
    twice = [{"handler": "test.echo", "key": "k"}, {"handler": "test.echo", "key": "k"}]
    refused = client.post(BATCH, json={"runs": twice})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "runs[1].key"
    assert _head(api) == head


def test_a_key_sent_again_for_another_run_is_refused(api: "Api") -> None:
    """If a batch reuses a key for a different run, then it is refused naming the run,
    and the other, new runs of that batch are not written either."""
    client = api.client(Role.OPERATOR)
    first = client.post(BATCH, json={"runs": [{"handler": "test.echo", "key": "order-1"}]})
    assert first.status_code == 202, first.text
    head = _head(api)
    changed = [*_runs(3), {"handler": "test.echo", "key": "order-1", "payload": {"x": 1}}]
    refused = client.post(BATCH, json={"runs": changed})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["field"] == "runs[3].key"
    assert _head(api) == head


def test_batches_are_bounded_and_for_operators(api: "Api") -> None:
    """If a batch is empty or holds more than 1,000 runs, then it is refused with the
    bound named; a viewer may not enqueue a batch at all."""
    operator = api.client(Role.OPERATOR)
    head = _head(api)
    for runs in ([], _runs(1001)):
        refused = operator.post(BATCH, json={"runs": runs})
        assert refused.status_code in (400, 422), refused.text
        assert "runs" in str(refused.json()["error"]["field"])
    viewer = api.client(Role.VIEWER)
    assert viewer.post(BATCH, json={"runs": _runs(1)}).status_code == 403
    assert _head(api) == head


def test_two_racing_copies_of_a_batch_make_each_run_once(api: "Api") -> None:
    """If the same batch is sent twice at once, then both answer the same runs and the
    log holds each of them once."""
    answers: list[dict[str, Any]] = []
    headers = {"Idempotency-Key": "race"}

    def send() -> None:
        client = api.client(Role.OPERATOR)
        response = client.post(BATCH, json={"runs": _runs(300)}, headers=headers)
        assert response.status_code == 202, response.text
        answers.append(response.json())

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 2
    assert answers[0]["executions"] == answers[1]["executions"]
    assert sorted(a["created"] for a in answers)[1] == 300  # one made them all
    ledger = api.container.ledger
    ids = [ref["id"] for ref in answers[0]["executions"]]
    assert all(len(list(ledger.history(uuid.UUID(i)))) == 1 for i in ids[:20])


def test_unique_runs_over_http_answer_200_for_a_duplicate(api: "Api") -> None:
    """If a run names a unique key that a pending run holds, then the answer is 200 with
    that run and duplicate true (202 for the first); a key the payload cannot fill is
    422 naming unique.key; a batch refuses unique runs naming the run."""
    client = api.client(Role.OPERATOR)
    body = {
        "handler": "test.echo",
        "payload": {"order_id": 77},
        "delay_seconds": 3600,
        "unique": {"key": "order:{payload.order_id}", "on_conflict": "debounce"},
    }
    first = client.post("/api/v1/executions", json=body)
    assert first.status_code == 202, first.text
    assert first.json()["duplicate"] is False
    again = client.post("/api/v1/executions", json=body | {"payload": {"order_id": 77, "v": 2}})
    assert again.status_code == 200, again.text
    assert (again.json()["id"], again.json()["duplicate"]) == (first.json()["id"], True)
    events = client.get(f"/api/v1/executions/{first.json()['id']}/events").json()
    assert [e["type"] for e in events] == ["ExecutionEnqueued", "ExecutionDebounced"]
    head = _head(api)
    unfilled = client.post("/api/v1/executions", json=body | {"payload": {}})
    assert unfilled.status_code == 422, unfilled.text
    assert unfilled.json()["error"]["field"] == "unique.key"
    in_batch = client.post(BATCH, json={"runs": [*_runs(1), body]})
    assert in_batch.status_code == 422, in_batch.text
    assert in_batch.json()["error"]["field"] == "runs[1].unique"
    assert _head(api) == head


def test_a_unique_trigger_of_a_job_makes_one_run_per_key(api: "Api") -> None:
    """If a job is triggered twice with a unique key filled from its payload, then the
    second trigger answers 200 with the first run; a plain trigger still starts one."""
    client = api.client(Role.OPERATOR)
    job = client.post(
        "/api/v1/jobs",
        json={"name": "reindex", "handler": "test.echo", "payload": {"shop": 7}},
    ).json()
    rule = {"unique": {"key": "reindex:{payload.shop}"}}
    first = client.post(f"/api/v1/jobs/{job['id']}/trigger", json=rule)
    assert first.status_code == 202, first.text
    again = client.post(f"/api/v1/jobs/{job['id']}/trigger", json=rule)
    assert again.status_code == 200, again.text
    assert (again.json()["id"], again.json()["duplicate"]) == (first.json()["id"], True)
    plain = client.post(f"/api/v1/jobs/{job['id']}/trigger")
    assert plain.status_code == 202, plain.text
    assert plain.json()["id"] != first.json()["id"]
