"""Finding runs through the API and the dashboard's header, on PostgreSQL: by a word of
their input, by the start of their id, and straight to a run's or a job's page by its
whole id."""

import time
import uuid

import httpx
from tests.integration.api.conftest import Api

from jobledger.domain.roles import Role


def run(client: httpx.Client, payload: dict[str, object]) -> str:
    sent = client.post(
        "/api/v1/executions", json={"handler": "test.echo", "queue": "nobody", "payload": payload}
    )
    assert sent.status_code == 202, sent.text
    return str(sent.json()["id"])


def found(client: httpx.Client, search: str) -> list[str]:
    """The ids a search of the executions finds, once the read models show both runs."""
    deadline = time.monotonic() + 20
    while True:
        answer = client.get("/api/v1/executions", params={"search": search})
        assert answer.status_code == 200, answer.text
        listed = client.get("/api/v1/executions", params={"queue": "nobody"}).json()
        if listed["total"] >= 2 or time.monotonic() > deadline:
            return [row["id"] for row in answer.json()["items"]]
        time.sleep(0.05)


def test_runs_are_found_by_a_word_of_their_input_or_the_start_of_their_id(api: Api) -> None:
    """If two runs differ in their input, then a search for a word of one's input finds
    it alone in any case, the start of its id finds it, and a word of neither finds
    none."""
    operator = api.client(Role.OPERATOR)
    acme = run(operator, {"customer": "Acme Corp", "invoice": 7781})
    globex = run(operator, {"customer": "Globex"})
    assert found(operator, "ACME") == [acme]
    assert found(operator, "globex") == [globex]
    assert found(operator, acme[:8]) == [acme]
    assert found(operator, "umbrella") == []


def test_the_header_search_opens_a_run_by_its_id_and_lists_the_rest(api: Api) -> None:
    """If the header's search gets a run's whole id, then it opens the run's page; a
    job's id opens the job's page; other text lists the runs it finds."""
    operator = api.client(Role.OPERATOR)
    execution_id = run(operator, {"customer": "Initech"})
    created = operator.post(
        "/api/v1/jobs",
        json={"name": "searchable", "handler": "test.echo", "schedule": {"kind": "manual"}},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    viewer = api.session("viewer")
    api.wait_for(lambda: viewer.get(f"/api/v1/executions/{execution_id}").status_code == 200)
    opened = {
        execution_id: f"/ui/executions/{execution_id}",
        job_id: f"/ui/jobs/{job_id}",
        "initech": "/ui/executions?search=initech",
        str(uuid.uuid4()): "/ui/executions?search=",
    }
    for text, target in opened.items():
        answer = viewer.get("/ui/search", params={"q": text}, follow_redirects=False)
        assert answer.status_code in {302, 303, 307}, answer.text
        assert answer.headers["location"].startswith(target), (text, answer.headers)
