"""Why a pending run waits, said by every list and page of runs: with a real worker on
PostgreSQL and Redis, through the API and the dashboard."""

import html
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
from tests.integration.api.conftest import Api

from jobledger.domain.roles import Role
from jobledger.services.waiting import READY

BEATS = timedelta(seconds=30)


def run(client: httpx.Client, **body: Any) -> str:
    sent = client.post("/api/v1/executions", json={"payload": {}, **body})
    assert sent.status_code == 202, sent.text
    return str(sent.json()["id"])


def waiting(client: httpx.Client, execution_id: str) -> str | None:
    detail = client.get(f"/api/v1/executions/{execution_id}")
    return None if detail.status_code != 200 else detail.json()["execution"]["waiting"]


def until(read: Callable[[], str | None], expected: Callable[[str | None], bool]) -> str:
    """What ``read`` gives once ``expected`` holds of it ("" for None)."""
    deadline = time.monotonic() + 20
    while not expected(seen := read()):
        assert time.monotonic() < deadline, f"still {seen!r}"
        time.sleep(0.05)
    return seen or ""


def test_each_pending_run_says_why_it_waits(served: Api) -> None:
    """If runs wait because no worker serves their queue, their queue is paused, they are
    not due yet, or they back off after a failed attempt, then each says so (until when,
    for the last two) in its detail, in the list and on its page; a finished run says
    nothing."""
    operator = served.client(Role.OPERATOR)
    unserved = run(operator, handler="test.echo", queue="reports")
    later = run(operator, handler="test.echo", delay_seconds=600)
    retry = {
        "max_retries": 2,
        "initial_backoff_seconds": 600,
        "max_backoff_seconds": 3600,
        "jitter": False,
    }
    failing = run(operator, handler="test.fail", retry=retry)
    done = run(operator, handler="test.echo")
    assert until(lambda: waiting(operator, unserved), bool) == (
        "no live worker serves queue reports"
    )
    assert until(lambda: waiting(operator, later), bool).startswith("due, until ")
    backoff = until(lambda: waiting(operator, failing), lambda w: bool(w and "back-off" in w))
    assert backoff.startswith("back-off after attempt 1 failed, until ")
    until(
        lambda: operator.get(f"/api/v1/executions/{done}").json()["execution"]["status"],
        lambda status: status == "completed",
    )
    assert waiting(operator, done) is None

    paused = operator.post("/api/v1/queues/default/pause", json={"reason": "maintenance"})
    assert paused.status_code == 200, paused.text
    held = run(operator, handler="test.echo")
    assert until(lambda: waiting(operator, held), bool).startswith("queue default paused by ")
    listed = operator.get("/api/v1/executions", params={"status": "pending", "limit": 50})
    reasons = {row["id"]: row["waiting"] for row in listed.json()["items"]}
    assert reasons[unserved] == "no live worker serves queue reports"
    assert reasons[held].startswith("queue default paused by ")
    page = served.session("admin").get(f"/ui/executions/{held}", headers={"Accept": "text/html"})
    assert "queue default paused by " in html.unescape(page.text)
    operator.post("/api/v1/queues/default/resume")
    until(lambda: waiting(operator, held), lambda w: w in (None, READY))
