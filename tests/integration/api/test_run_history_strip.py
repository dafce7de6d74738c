"""A job's run history as a strip of coloured cells, on the jobs list and the job's page
(as Airflow's grid and Oban Web show it): on PostgreSQL, through the dashboard."""

import re
import uuid
from typing import TYPE_CHECKING

from jobledger.bootstrap import build_services
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

HTML = {"Accept": "text/html"}
CELL = re.compile(
    r'class="cell status-(\w+)" href="/ui/executions/([0-9a-f-]+)" title="\w+, [0-9 :-]+ UTC"'
)


def test_a_jobs_latest_runs_show_as_cells_oldest_first(api: "Api") -> None:
    """If a job ran three times and its second run was cancelled, then its row on the
    jobs list and its page show three cells, oldest first, each linking to its run and
    coloured by its status; the read side gives the latest first, as many as asked."""
    operator = api.client(Role.OPERATOR)
    job = {"name": "strip", "handler": "test.echo", "schedule": {"kind": "manual"}}
    created = operator.post("/api/v1/jobs", json=job)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    runs = []
    for key in ("a", "b", "c"):
        fired = operator.post(f"/api/v1/jobs/{job_id}/trigger", headers={"Idempotency-Key": key})
        assert fired.status_code == 202, fired.text
        runs.append(fired.json()["id"])
    cancelled = operator.post(f"/api/v1/executions/{runs[1]}/cancel", json={"reason": "no"})
    assert cancelled.status_code == 200, cancelled.text
    expected = [("pending", runs[0]), ("cancelled", runs[1]), ("pending", runs[2])]
    browser = api.session("admin")

    def cells(path: str) -> list[tuple[str, str]]:
        page = browser.get(path, headers=HTML)
        assert page.status_code == 200, page.text
        return CELL.findall(page.text)

    api.wait_for(lambda: cells(f"/ui/jobs/{job_id}") == expected)
    assert cells("/ui/jobs") == expected  # the only job, so the only strip
    views = build_services(api.container).views
    latest = views.recent_runs([uuid.UUID(job_id)], per_job=2)
    assert [(c.status, str(c.id)) for c in latest[uuid.UUID(job_id)]] == expected[:0:-1]
