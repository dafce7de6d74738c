"""A run sent to a queue no worker serves is accepted with a warning, and the queue list
and the system page show that queue without workers: with a real worker, on the
embedded stores (SQLite, memory) and on PostgreSQL and Redis."""

import html
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from tests.integration.api.conftest import Api, serve_api, worker_for

from jobledger.adapters.store import migrate
from jobledger.client import Client
from jobledger.domain.roles import Role
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli, LiveServer

SERVED = "default"  # the queue the worker leases from (JOBLEDGER_WORKER_QUEUES' default)
UNSERVED = "reports"
BEATS = timedelta(seconds=30)


@pytest.fixture(params=["embedded", "postgres"])
def served(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    live_server: type["LiveServer"],
) -> Iterator[Api]:
    """The API with a worker of the default queue, on either kind of store."""
    if request.param == "embedded":
        stores = (f"sqlite:///{tmp_path / 'events.sqlite3'}", "")
        migrate(load_settings({}, database_url=stores[0]), progress=lambda _: None)
    else:
        stores = (
            request.getfixturevalue("postgres_url"),
            request.getfixturevalue("redis_server"),
        )
    with serve_api(*stores, live_server) as api, worker_for(api):
        presence = api.container.presence
        api.wait_for(lambda: bool(presence.live(now=datetime.now(UTC), stale_after=BEATS)))
        yield api


def _queues(client: httpx.Client) -> dict[str, dict[str, Any]]:
    body = client.get("/api/v1/queues").json()
    return {row["name"]: row for row in body["queues"]}


def _workers(client: httpx.Client, queue: str) -> int | None:
    """The queue's live workers by /queues (None: the queue is not listed yet)."""
    row = _queues(client).get(queue)
    return None if row is None else int(row["workers"])


def _run(client: httpx.Client, queue: str) -> httpx.Response:
    body = {"handler": "test.echo", "payload": {}, "queue": queue}
    return client.post("/api/v1/executions", json=body)


def test_a_run_to_a_queue_no_worker_serves_is_accepted_with_a_warning(served: Api) -> None:
    """If a run goes to the queue a worker serves, then the answer has no warning; if
    it goes to a queue no worker serves, then it is accepted (202) with a warning that
    names the queue and the setting that fixes it; so does a batch and a trigger."""
    operator = served.client(Role.OPERATOR)
    fine = _run(operator, SERVED)
    assert fine.status_code == 202, fine.text
    assert fine.json()["warnings"] == []
    waiting = _run(operator, UNSERVED)
    assert waiting.status_code == 202, waiting.text
    [warning] = waiting.json()["warnings"]
    assert f"queue '{UNSERVED}'" in warning
    assert f"JOBLEDGER_WORKER_QUEUES={UNSERVED}" in warning
    assert "30 seconds" in warning  # three heartbeats of the default 30 s lease
    runs = [{"handler": "test.echo", "queue": q} for q in (SERVED, UNSERVED, UNSERVED)]
    batch = operator.post("/api/v1/executions:batch", json={"runs": runs})
    assert batch.status_code == 202, batch.text
    assert batch.json()["warnings"] == [warning]
    assert _trigger_warnings(operator, SERVED) == []
    assert _trigger_warnings(operator, UNSERVED) == [warning]


def _trigger_warnings(client: httpx.Client, queue: str) -> list[str]:
    job = {
        "name": f"manual {uuid.uuid4().hex[:8]}",
        "handler": "test.echo",
        "queue": queue,
        "schedule": {"kind": "manual"},
    }
    created = client.post("/api/v1/jobs", json=job)
    assert created.status_code == 201, created.text
    triggered = client.post(f"/api/v1/jobs/{created.json()['id']}/trigger")
    assert triggered.status_code == 202, triggered.text
    warnings: list[str] = triggered.json()["warnings"]
    return warnings


def test_the_queue_list_and_the_system_page_show_a_queue_without_workers(
    served: Api,
) -> None:
    """If a queue has runs but no worker serves it, then /queues lists it with no
    workers, and the system page says "no workers" with the fix instead of "running";
    the queue a worker serves shows that worker."""
    operator = served.client(Role.OPERATOR)
    assert _run(operator, UNSERVED).status_code == 202
    assert _run(operator, SERVED).status_code == 202
    served.wait_for(lambda: None not in (_workers(operator, UNSERVED), _workers(operator, SERVED)))
    rows = _queues(operator)
    assert rows[UNSERVED]["workers"] == 0
    assert rows[UNSERVED]["unserved_since"] is None  # no worker ever served it
    assert rows[SERVED]["workers"] == 1
    assert rows[SERVED]["unserved_since"] is None
    page = served.session("viewer").get("/ui/system")
    assert page.status_code == 200, page.text
    assert "running (1 worker)" in _row(page.text, SERVED)
    unserved = _row(page.text, UNSERVED)
    assert "no workers" in unserved
    assert "running" not in unserved
    assert f"JOBLEDGER_WORKER_QUEUES={UNSERVED}" in unserved


def _row(page: str, queue: str) -> str:
    found = re.search(rf'<tr data-queue="{queue}".*?</tr>', page, re.DOTALL)
    assert found, page
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(0)))


def test_the_client_and_the_command_line_say_so(served: Api, jobledger_cli: "JobledgerCli") -> None:
    """If the client sends runs to a queue no worker serves, then each returned run
    carries the warning, one at a time or in a batch; `jobledger run` prints it on
    stderr, and prints nothing of the kind for the queue a worker serves."""
    with Client(served.url, served.tokens[Role.OPERATOR]) as client:
        assert client.enqueue("test.echo", {}, queue=SERVED).warnings == []
        [warning] = client.enqueue("test.echo", {}, queue=UNSERVED).warnings
        refs = client.enqueue_many("test.echo", [{}, {}], queue=UNSERVED)
        assert [ref.warnings for ref in refs] == [[warning], [warning]]
    env = {"JOBLEDGER_URL": served.url, "JOBLEDGER_TOKEN": served.tokens[Role.OPERATOR]}
    waiting = jobledger_cli.run("run", "test.echo", "--queue", UNSERVED, env=env)
    assert waiting.returncode == 0, waiting.stderr
    assert f"jobledger run: warning: {warning}" in waiting.stderr
    fine = jobledger_cli.run("run", "test.echo", "--queue", SERVED, env=env)
    assert fine.returncode == 0, fine.stderr
    assert "warning" not in fine.stderr
