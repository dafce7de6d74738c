"""A stored event that no longer decodes never makes a reader answer 5xx: histories and
the audit log show a placeholder for it; rebuilding its aggregate answers 409."""

import html
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
from tests.integration.api.test_api_behaviour import CRON_JOB
from tests.integration.api.test_quarantine import BIG, cli, enqueue, enqueue_raw_big_int
from tests.integration.raw_events import write_undecodable

from jobledger.domain.execution import Execution
from jobledger.domain.job import Job
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.integration.api.conftest import Api

HTML = {"Accept": "text/html"}
QUARANTINE_LIST = "jobledger projections quarantine list"


def placeholder(events: list[dict[str, Any]], version: int) -> dict[str, Any]:
    [shown] = [e for e in events if e["version"] == version]
    assert shown["undecodable"] is True, shown
    assert shown["timestamp"] is None
    assert shown["error"].startswith("MapperDeserialisationError: Cannot decode stored event")
    return shown


def assert_refused_rebuild(response: httpx.Response, job_id: uuid.UUID, position: int) -> None:
    assert response.status_code == 409, response.text
    message = response.json()["error"]["message"]
    assert f"{job_id} cannot be rebuilt: its event v2 (log position {position}, " in message
    assert QUARANTINE_LIST in message


def test_readers_show_a_placeholder_for_an_undecodable_event(api: "Api") -> None:
    """If a job's and an execution's streams each hold an event that no longer decodes,
    then their event histories, the audit log, the dashboard's execution and audit
    pages and `jobledger dlq show` a placeholder (topic, version, position,
    error) for it and answer 200; the job's state and past states after it answer 409
    naming the event and the quarantine list, the dashboard's job page too, while a
    past state before it still answers."""
    viewer = api.client(Role.VIEWER)
    created = api.client(Role.OPERATOR).post("/api/v1/jobs", json=CRON_JOB)
    assert created.status_code == 201, created.text
    job_id = uuid.UUID(created.json()["id"])
    ledger = api.container.ledger
    write_undecodable(ledger, Job.Updated.TOPIC, job_id, version=2)
    execution_id = enqueue(ledger, {"n": 1})
    write_undecodable(ledger, Execution.Leased.TOPIC, execution_id, version=2)

    job_events = viewer.get(f"/api/v1/jobs/{job_id}/events")
    assert job_events.status_code == 200, job_events.text
    bad_job = placeholder(job_events.json(), 2)
    assert bad_job["data"] == {"topic": Job.Updated.TOPIC}
    run_events = viewer.get(f"/api/v1/executions/{execution_id}/events")
    assert run_events.status_code == 200, run_events.text
    bad_run = placeholder(run_events.json(), 2)
    assert bad_run["type"] == "ExecutionLeased"

    audit = viewer.get("/api/v1/audit/events", params={"types": "JobUpdated,ExecutionLeased"})
    assert audit.status_code == 200, audit.text
    shown = audit.json()["items"]
    assert {(e["aggregate_id"], e["position"], e["undecodable"]) for e in shown} == {
        (str(job_id), bad_job["position"], True),
        (str(execution_id), bad_run["position"], True),
    }
    assert bad_job["position"] < bad_run["position"]

    position = bad_job["position"]
    assert_refused_rebuild(viewer.get(f"/api/v1/jobs/{job_id}"), job_id, position)
    now = {"as_of": datetime.now(tz=UTC).isoformat()}
    assert_refused_rebuild(viewer.get(f"/api/v1/jobs/{job_id}", params=now), job_id, position)
    before = viewer.get(f"/api/v1/jobs/{job_id}", params={"as_of": "1"})
    assert (before.status_code, before.json()["version"]) == (200, 1)
    operator = api.client(Role.OPERATOR)
    assert_refused_rebuild(operator.post(f"/api/v1/jobs/{job_id}/pause"), job_id, position)

    browser = api.session("admin")
    job_page = browser.get(f"/ui/jobs/{job_id}", headers=HTML)
    assert job_page.status_code == 409
    assert f"log position {position}, " in job_page.text
    assert QUARANTINE_LIST in job_page.text
    run_page = browser.get(f"/ui/executions/{execution_id}", headers=HTML)
    assert run_page.status_code == 200, run_page.text
    assert "cannot be decoded: MapperDeserialisationError" in run_page.text
    assert '"n": 1' in html.unescape(run_page.text)  # its input: one bad event hides none
    detail = viewer.get(f"/api/v1/executions/{execution_id}")
    assert detail.status_code == 200, detail.text
    assert detail.json()["payload"] == {"n": 1}
    audit_page = browser.get("/ui/audit", headers=HTML)
    assert audit_page.status_code == 200, audit_page.text

    code, out = cli(api, "dlq", "show", str(execution_id))
    assert code == 0, out
    assert '"event": "undecodable"' in out.splitlines()[-1]


def test_a_stream_of_only_an_unknown_event_type_has_a_history(api: "Api") -> None:
    """If the only event of a stream has a type this release does not know, then its
    history shows it as a placeholder under both kinds (the id's kind is unknown) and
    rebuilding it answers 409."""
    viewer = api.client(Role.VIEWER)
    stream = write_undecodable(api.container.ledger, "jobledger:ExecutionRenamed")
    for kind in ("jobs", "executions"):
        events = viewer.get(f"/api/v1/{kind}/{stream}/events")
        assert events.status_code == 200, events.text
        [shown] = events.json()
        assert (shown["type"], shown["undecodable"]) == ("ExecutionRenamed", True)
        assert "TopicError" in shown["error"]
    rebuilt = viewer.get(f"/api/v1/jobs/{stream}")
    assert rebuilt.status_code == 409, rebuilt.text
    assert QUARANTINE_LIST in rebuilt.json()["error"]["message"]


def test_an_event_the_queue_cannot_carry_is_shown_whole(api: "Api") -> None:
    """If an execution's payload holds an integer past 64 bits (the queue quarantines
    it), then its events show it, value and all, and its dashboard page answers."""
    execution_id = enqueue_raw_big_int(api.container.ledger)
    events = api.client(Role.VIEWER).get(f"/api/v1/executions/{execution_id}/events")
    assert events.status_code == 200, events.text
    [enqueued] = events.json()
    assert (enqueued["undecodable"], enqueued["data"]["spec"]["payload"]) == (False, {"big": BIG})
    page = api.session("admin").get(f"/ui/executions/{execution_id}", headers=HTML)
    assert page.status_code == 200, page.text
    assert "cannot be decoded" not in page.text
