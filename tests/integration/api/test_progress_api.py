"""A run's progress over real HTTP: live while it runs, from the log once it ended, on
the execution's API answer and its dashboard page."""

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tests.integration.api.conftest import worker_for

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api


def test_progress_shows_while_running_and_the_log_keeps_the_reports(
    api_with: Callable[..., contextlib.AbstractContextManager["Api"]],
) -> None:
    """If a handler reports four steps a second apart, then the execution's answer shows
    its progress while it runs (rising, from the worker's live view), the run's page,
    the executions list and the workers page draw a progress bar, and once it completed
    the log holds one ExecutionProgressed per new message and the answer keeps the last
    report."""
    # A heartbeat a second, so the workers page lists the run while it runs.
    with api_with(worker_lease_ttl_seconds="3") as api, worker_for(api):
        client = api.client(Role.OPERATOR)
        run = client.post(
            "/api/v1/executions",
            json={"handler": "test.progress", "payload": {"steps": 4, "seconds": 4}},
        )
        assert run.status_code == 202, run.text
        run_id = run.json()["id"]
        seen: list[float] = []
        pages: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = client.get(f"/api/v1/executions/{run_id}")
            row: dict[str, Any] = answer.json()["execution"] if answer.status_code == 200 else {}
            if row.get("status") == "completed":
                break
            progress = row.get("progress")
            if row.get("status") == "running" and progress and progress["percent"] not in seen:
                seen.append(progress["percent"])
                if len(seen) == 2:  # the run's page, the list and the workers, while it runs
                    pages = [
                        client.get(f"/ui/{at}").text
                        for at in (f"executions/{run_id}", "executions", "workers")
                    ]
            time.sleep(0.1)
        assert len(seen) >= 2, seen
        assert seen == sorted(seen)
        assert ['<progress max="100"' in p for p in pages] == [True, True, True], pages[2]
        events = client.get(f"/api/v1/executions/{run_id}/events").json()
        reports = [e["data"]["progress"] for e in events if e["type"] == "ExecutionProgressed"]
        assert [r["message"] for r in reports] == [f"step {n} of 4" for n in range(1, 5)]
        api.wait_for(
            lambda: (
                client.get(f"/api/v1/executions/{run_id}").json()["execution"]["progress"]
                is not None
            )
        )
        final = client.get(f"/api/v1/executions/{run_id}").json()["execution"]
        assert (final["status"], final["progress"]["percent"]) == ("completed", 100.0)
        assert final["progress"]["data"] == {"step": 4}
