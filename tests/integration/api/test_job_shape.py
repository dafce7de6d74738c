"""One shape for a job: what create takes is what create, GET, the list's rows, a PATCH
answer and apply's plan give back, for every kind of schedule."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.integration.api.conftest import serve_api

from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.roles import Role
from jobledger.schemas.jobs import CronIn, IntervalIn, JobIn, OnceIn, RetryIn

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")
T0 = datetime(2027, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def served(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    with serve_api(module_postgres_url, redis_server, live_server) as api:
        yield api


def _cron() -> st.SearchStrategy[CronIn]:
    return st.builds(
        CronIn,
        cron=st.sampled_from(["30 2 * * *", "*/15 * * * *", "0 9 * * 1-5", "@daily"]),
        timezone=st.sampled_from(ZONES),
        jitter_seconds=st.integers(0, 600),
    )


@st.composite
def _interval(draw: st.DrawFn) -> IntervalIn:
    every = draw(st.integers(60, 7 * 86_400))
    return IntervalIn(
        every_seconds=every,
        offset_seconds=draw(st.integers(0, every - 1)),
        timezone=draw(st.sampled_from(ZONES)),
    )


def _once() -> st.SearchStrategy[OnceIn]:
    return st.builds(OnceIn, run_at=st.integers(1, 10**6).map(lambda s: T0 + timedelta(seconds=s)))


def _jobs() -> st.SearchStrategy[JobIn]:
    seconds = st.integers(1, 86_400).map(float) | st.sampled_from([1.5, 2.25, 90.5])
    return st.builds(
        JobIn,
        name=st.from_regex(r"[a-z][a-z0-9 ._-]{0,20}", fullmatch=True),
        handler=st.just("test.echo"),
        payload=st.dictionaries(st.text("abc", max_size=3), st.integers(-5, 5), max_size=2),
        queue=st.sampled_from(["default", "reports", "q-1"]),
        priority=st.integers(0, 9),
        timeout_seconds=seconds,
        retry=st.builds(
            RetryIn,
            max_retries=st.integers(0, 10),
            initial_backoff_seconds=st.sampled_from([0.5, 1.0, 5.0]),
            max_backoff_seconds=st.sampled_from([300.0, 3600.0]),
            jitter=st.booleans(),
        ),
        schedule=_cron() | _interval() | _once(),
        misfire=st.sampled_from(list(MisfirePolicy)),
        overlap=st.sampled_from(list(OverlapPolicy)),
        description=st.text("xyz ", max_size=10),
    )


def _json(value: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value))


def _row(api: "Api", client: httpx.Client, job_id: str, version: int) -> dict[str, Any]:
    """The job's row in the list, once the read model shows ``version``."""
    found: dict[str, Any] = {}

    def shown() -> bool:
        items = client.get("/api/v1/jobs", params={"limit": 500}).json()["items"]
        found.update(next((row for row in items if row["id"] == job_id), {}))
        return found.get("version") == version

    api.wait_for(shown)
    return found


@settings(
    max_examples=12,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # each example is a server round
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(job=_jobs(), new_timeout=st.integers(1, 3600).map(float))
def test_create_get_list_patch_and_apply_give_one_shape(
    served: "Api", job: JobIn, new_timeout: float
) -> None:
    """If a cron, interval or one-shot job is created, then the create answer, GET, its
    list row (``definition``, and ``schedule`` beside it), the PATCH answer and apply's
    plan all hold the definition as create took it: the schedule with its kind and
    every field (an interval's length too), durations in seconds."""
    client = served.client(Role.OPERATOR)
    sent = _json(job)
    created = client.post("/api/v1/jobs", json=sent)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert created.json()["definition"] == sent
    assert client.get(f"/api/v1/jobs/{job_id}").json()["definition"] == sent
    row = _row(served, client, job_id, version=1)
    assert (row["definition"], row["schedule"]) == (sent, sent["schedule"])

    patched = client.patch(f"/api/v1/jobs/{job_id}", json={"timeout_seconds": new_timeout})
    assert patched.status_code == 200, patched.text
    changed = sent | {"timeout_seconds": new_timeout}
    assert patched.json()["definition"] == changed
    assert _row(served, client, job_id, version=2)["definition"] == changed

    key = f"shape.{uuid.uuid4().hex[:12]}"
    applied = client.post("/api/v1/jobs:apply", json={"jobs": [sent | {"key": key}]})
    assert applied.status_code == 200, applied.text
    [step] = applied.json()["plan"]
    assert (step["action"], step["definition"]) == ("create", sent)
    assert client.get(f"/api/v1/jobs/{step['job_id']}").json()["definition"] == sent


def test_the_jobs_page_shows_an_intervals_length(served: "Api") -> None:
    """If an interval job is listed on the dashboard's jobs page, then its schedule
    reads with its length and offset (the list row carries the whole schedule)."""
    operator = served.client(Role.OPERATOR)
    name = f"every 45 minutes {uuid.uuid4().hex[:6]}"
    body = {
        "name": name,
        "handler": "test.echo",
        "schedule": {"kind": "interval", "every_seconds": 2700, "offset_seconds": 300},
    }
    job_id = operator.post("/api/v1/jobs", json=body).json()["id"]
    _row(served, operator, job_id, version=1)
    page = served.session("viewer").get("/ui/jobs", params={"search": name})
    assert page.status_code == 200
    assert "every 2700 s (offset 300 s) in UTC" in page.text
