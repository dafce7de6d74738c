"""Bulk actions on runs through the API, on PostgreSQL and Redis with a real worker:
cancel, and retry now, by ids or by the list's filter, each counted first by a dry run,
each change an event that says who asked."""

import functools
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from tests.integration.api.conftest import Api

from jobledger.domain.roles import Role

BEATS = timedelta(seconds=30)
SOME_ID = "8c5e1d3a-6a43-4c5e-9b8f-2f5d1c0b9a11"
# A back-off long enough that only a retry now ends it within the test.
LONG_RETRY = {
    "max_retries": 2,
    "initial_backoff_seconds": 600,
    "max_backoff_seconds": 3600,
    "jitter": False,
}


def run(client: httpx.Client, **body: Any) -> str:
    sent = client.post("/api/v1/executions", json={"payload": {}, **body})
    assert sent.status_code == 202, sent.text
    return str(sent.json()["id"])


def detail(client: httpx.Client, execution_id: str) -> dict[str, Any]:
    answer = client.get(f"/api/v1/executions/{execution_id}")
    return answer.json()["execution"] if answer.status_code == 200 else {}


def field_of(client: httpx.Client, execution_id: str, name: str) -> Any:
    return detail(client, execution_id).get(name)


def until(read: Callable[[], Any], expected: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + 20
    while not expected(seen := read()):
        assert time.monotonic() < deadline, f"still {seen!r}"
        time.sleep(0.05)
    return seen


def events(client: httpx.Client, execution_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/api/v1/executions/{execution_id}/events")
    assert answer.status_code == 200, answer.text
    return list(answer.json())


def leases(client: httpx.Client, execution_id: str) -> int:
    """How many attempts the run started."""
    return sum(e["type"] == "ExecutionLeased" for e in events(client, execution_id))


def test_retry_now_ends_a_back_off_and_the_run_runs_at_once(served: Api) -> None:
    """If runs back off for ten minutes after a failed attempt, then a dry run counts
    them without a change, and retry now by their ids makes each due at once: the
    worker runs its next attempt within seconds, and the event names who asked."""
    operator = served.client(Role.OPERATOR)
    failing = [run(operator, handler="test.fail", retry=LONG_RETRY) for _ in range(2)]
    for execution_id in failing:
        waits = functools.partial(field_of, operator, execution_id, "waiting")
        until(waits, lambda w: "back-off" in (w or ""))
    body = {"ids": failing, "reason": "the endpoint is back"}
    dry = operator.post("/api/v1/executions/retry", json={**body, "dry_run": True})
    assert dry.json() == {"matched": 2, "changed": 0, "refused": 0, "dry_run": True}
    assert [leases(operator, e) for e in failing] == [1, 1]
    done = operator.post("/api/v1/executions/retry", json=body)
    assert done.status_code == 200, done.text
    assert done.json() == {"matched": 2, "changed": 2, "refused": 0, "dry_run": False}
    for execution_id in failing:
        until(functools.partial(leases, operator, execution_id), lambda n: n == 2)
        brought = [
            e for e in events(operator, execution_id) if e["type"] == "ExecutionBroughtForward"
        ]
        assert [(e["data"]["reason"], bool(e["data"]["by"])) for e in brought] == [
            ("the endpoint is back", True)
        ]
    again = operator.post(
        "/api/v1/executions/retry", json={"ids": [run(operator, handler="test.echo")]}
    )
    assert again.json()["changed"] == 0


def test_cancel_by_filter_counts_first_and_cancels_only_what_matches(served: Api) -> None:
    """If pending runs wait in a queue no worker serves and others in another, then a
    dry run of cancel filtered by that queue counts only them, the cancel ends only
    them, and a second cancel finds none left to change."""
    operator = served.client(Role.OPERATOR)
    stuck = [run(operator, handler="test.echo", queue="reports") for _ in range(3)]
    kept = run(operator, handler="test.echo", queue="other", delay_seconds=600)
    for execution_id in [*stuck, kept]:
        status = functools.partial(field_of, operator, execution_id, "status")
        until(status, lambda s: s == "pending")
    selection = {"queue": "reports", "status": "pending", "reason": "wrong queue"}
    dry = operator.post("/api/v1/executions/cancel", json={**selection, "dry_run": True})
    assert dry.json()["matched"] == 3
    done = operator.post("/api/v1/executions/cancel", json=selection)
    assert done.json() == {"matched": 3, "changed": 3, "refused": 0, "dry_run": False}
    for execution_id in stuck:
        status = functools.partial(field_of, operator, execution_id, "status")
        until(status, lambda s: s == "cancelled")
    assert detail(operator, kept)["status"] == "pending"
    by_ids = operator.post("/api/v1/executions/cancel", json={"ids": stuck})
    assert by_ids.json() == {"matched": 3, "changed": 0, "refused": 3, "dry_run": False}


@pytest.mark.parametrize(
    ("body", "status", "field", "fixes"),
    [
        ({}, 422, "ids", "status=pending"),
        ({"ids": [SOME_ID], "queue": "x"}, 422, "ids", "alone"),
        ({"ids": [SOME_ID] * 1001}, 400, "ids", "schema"),  # the schema's bound
        ({"queue": "reports", "since": "2026-12-07T09:00:00"}, 400, "since", "schema"),
    ],
)
def test_a_bulk_action_without_a_clear_selection_is_refused(
    api: Api, body: dict[str, Any], status: int, field: str, fixes: str
) -> None:
    """If a bulk action names no runs, both ids and a filter, more ids than a request
    takes, or a time without its zone, then it is refused naming the field and the fix,
    and changes nothing."""
    operator = api.client(Role.OPERATOR)
    for action in ("cancel", "retry"):
        answer = operator.post(f"/api/v1/executions/{action}", json=body)
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert error["field"] == field, error
        assert fixes in error["fix"], error


def test_a_viewer_cannot_act_in_bulk(api: Api) -> None:
    """If a viewer asks for a bulk cancel or retry, even a dry run, then it is refused
    with 403."""
    viewer = api.client(Role.VIEWER)
    for action in ("cancel", "retry"):
        answer = viewer.post(
            f"/api/v1/executions/{action}", json={"status": "pending", "dry_run": True}
        )
        assert answer.status_code == 403, answer.text
