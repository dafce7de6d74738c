"""The callers' budgets over a real server and Redis: requests per credential and per
client address (an IPv6 /64 is one address), shared by every API process; open
long-polls and runs created per minute per credential; nothing is written on a refusal."""

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx

from jobledger.bootstrap import bootstrap, web_app
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api

ApiWith = Callable[..., contextlib.AbstractContextManager["Api"]]
ME = "/api/v1/auth/me"


def _head(api: "Api") -> int:
    return api.container.ledger.recorder.max_notification_id() or 0


def test_a_credential_past_its_budget_gets_429_with_retry_after_and_ratelimit(
    api_with: ApiWith,
) -> None:
    """If a token spends its 5 requests a minute, then each answer says what is left
    (RateLimit-Limit, -Remaining, -Reset), the sixth is 429 with Retry-After and
    RateLimit-Remaining 0, and another credential is still served."""
    with api_with(api_requests_per_credential="5", api_budget_window_seconds="60") as api:
        viewer = api.client(Role.VIEWER)
        answers = [viewer.get(ME) for _ in range(5)]
        assert [a.status_code for a in answers] == [200] * 5
        assert [a.headers["RateLimit-Remaining"] for a in answers] == ["4", "3", "2", "1", "0"]
        assert {a.headers["RateLimit-Limit"] for a in answers} == {"5"}
        assert 1 <= int(answers[-1].headers["RateLimit-Reset"]) <= 60
        refused = viewer.get(ME)
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 12
        assert refused.headers["RateLimit-Remaining"] == "0"
        error = refused.json()["error"]
        assert "this credential" in error["message"]
        assert error["fix"]
        assert api.client(Role.OPERATOR).get(ME).status_code == 200


@contextlib.contextmanager
def _second_app(api: "Api", live_server: type["LiveServer"]) -> Iterator[str]:
    """Another API process's app: its own container on the same settings (database,
    Redis and prefix)."""
    with bootstrap(api.container.settings) as container, live_server(web_app(container)) as s:
        yield s.url


def test_two_api_processes_share_one_budget_over_redis(
    api_with: ApiWith, live_server: type["LiveServer"]
) -> None:
    """If a token's 6 requests a minute are spent 3 on one API app and 3 on another app
    over the same Redis, then the next request is refused by either."""
    with (
        api_with(api_requests_per_credential="6", api_budget_window_seconds="60") as api,
        _second_app(api, live_server) as other_url,
    ):
        headers = {"Authorization": f"Bearer {api.tokens[Role.VIEWER]}"}
        with httpx.Client(base_url=other_url, headers=headers, timeout=30) as other:
            first = api.client(Role.VIEWER)
            for _ in range(3):
                assert first.get(ME).status_code == 200
                assert other.get(ME).status_code == 200
            assert first.get(ME).status_code == 429
            assert other.get(ME).status_code == 429


def test_an_ipv6_slash_64_is_one_client_address(api_with: ApiWith) -> None:
    """If clients behind a trusted proxy use 3 requests of an address budget of 3 from
    three addresses of one IPv6 /64, then a fourth address of that /64 is refused (also
    with a made-up token, before it is looked up), and an address of another /64 and
    an IPv4 address are served."""
    settings = {
        "trusted_proxies": "127.0.0.1",
        "api_requests_per_address": "3",
        "api_budget_window_seconds": "60",
    }
    with api_with(**settings) as api:
        client = api.client(Role.VIEWER)

        def from_(address: str, token: str | None = None) -> int:
            headers = {"X-Forwarded-For": address}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            return client.get(ME, headers=headers).status_code

        assert [from_(f"2001:db8:1:2::{n}") for n in (1, 2, 3)] == [200] * 3
        assert from_("2001:db8:1:2:ffff::9") == 429
        assert from_("2001:db8:1:2::77", token="jl_made-up") == 429
        assert from_("2001:db8:1:3::1") == 200
        assert from_("203.0.113.7") == 200


def _parked_run(api: "Api") -> str:
    """A run that stays pending (no worker leases its queue), once the read model has it."""
    operator = api.client(Role.OPERATOR)
    created = operator.post("/api/v1/executions", json={"handler": "test.echo", "queue": "parked"})
    assert created.status_code == 202, created.text
    run = created.json()["id"]
    api.wait_for(lambda: operator.get(f"/api/v1/executions/{run}").status_code == 200)
    return str(run)


def test_a_credential_holds_at_most_its_long_polls(api_with: ApiWith) -> None:
    """If a token may hold 2 long-polls and holds 2, then a third answers 429 with
    Retry-After at once, another token may still wait, and once the two answered the
    token may wait again."""
    with api_with(api_long_polls="2") as api:
        run = _parked_run(api)
        url = f"/api/v1/executions/{run}"

        async def scenario() -> tuple[list[int], int, int]:
            viewer = {"Authorization": f"Bearer {api.tokens[Role.VIEWER]}"}
            async with httpx.AsyncClient(base_url=api.url, headers=viewer, timeout=30) as client:
                held = [asyncio.create_task(client.get(url, params={"wait": 3})) for _ in range(2)]
                await asyncio.sleep(1)
                third = await client.get(url, params={"wait": 3})
                other = api.client(Role.OPERATOR).get(url, params={"wait": 0.1})
                assert third.status_code == 429, third.text
                assert int(third.headers["Retry-After"]) >= 1
                answers = [a.status_code for a in await asyncio.gather(*held)]
                again = await client.get(url, params={"wait": 0.1})
                return answers, other.status_code, again.status_code

        answers, other, again = asyncio.run(scenario())
        assert answers == [200, 200]
        assert (other, again) == (200, 200)


def _batch(count: int) -> dict[str, object]:
    return {"runs": [{"handler": "test.echo", "queue": "parked"} for _ in range(count)]}


def test_runs_per_minute_count_each_run_of_a_batch_and_refusals_write_nothing(
    api_with: ApiWith,
) -> None:
    """If a token may create 5 runs a minute, then a batch of 3 passes; a second batch
    of 3, an ad-hoc run after 2 more and a batch of 6 (over the cap at once) answer 429
    with Retry-After, naming the cap, and write nothing."""
    with api_with(api_runs_per_minute="5") as api:
        operator = api.client(Role.OPERATOR)
        assert operator.post("/api/v1/executions:batch", json=_batch(3)).status_code == 202
        head = _head(api)
        refused = operator.post("/api/v1/executions:batch", json=_batch(3))
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        assert "5 runs a minute" in refused.json()["error"]["message"]
        too_big = operator.post("/api/v1/executions:batch", json=_batch(6))
        assert too_big.status_code == 429
        assert "at most 5" in too_big.json()["error"]["message"]
        assert _head(api) == head
        for _ in range(2):
            ran = operator.post("/api/v1/executions", json={"handler": "test.echo"})
            assert ran.status_code == 202
        head = _head(api)
        assert operator.post("/api/v1/executions", json={"handler": "test.echo"}).status_code == (
            429
        )
        assert _head(api) == head
        # Another credential has its own budget.
        admin = api.client(Role.ADMIN)
        assert admin.post("/api/v1/executions:batch", json=_batch(5)).status_code == 202


def test_a_backfill_counts_its_runs_and_a_refused_one_writes_nothing(api_with: ApiWith) -> None:
    """If a token may create 5 runs a minute, then a backfill of 10 missed occurrences
    answers 429 and writes nothing (the job's version and the log stay), its dry run
    still answers, and a backfill of 4 passes."""
    with api_with(api_runs_per_minute="5") as api:
        operator = api.client(Role.OPERATOR)
        job = operator.post(
            "/api/v1/jobs",
            json={
                "name": f"hourly {uuid.uuid4().hex[:6]}",
                "handler": "test.echo",
                "schedule": {"kind": "cron", "cron": "0 * * * *"},
            },
        )
        assert job.status_code == 201, job.text
        url = f"/api/v1/jobs/{job.json()['id']}/backfill"
        now = datetime.now(tz=UTC).replace(minute=0, second=0, microsecond=0)
        ten = _window(now, 12, 3)
        head = _head(api)
        assert operator.post(url, json=ten | {"dry_run": True}).json()["to_fire"] == 10
        refused = operator.post(url, json=ten)
        assert refused.status_code == 429, refused.text
        assert _head(api) == head
        four = _window(now, 12, 9)
        done = operator.post(url, json=four)
        assert done.status_code == 200, done.text
        assert done.json()["fired"] == 4


def _window(now: datetime, first: int, last: int) -> dict[str, str]:
    """The hours ``first`` to ``last`` before ``now``, both ends in."""
    start, end = now - timedelta(hours=first), now - timedelta(hours=last)
    return {"start": start.isoformat(), "end": end.isoformat()}


def test_a_workflow_counts_its_steps(api_with: ApiWith) -> None:
    """If a token may create 2 runs a minute, then a workflow of 3 steps answers 429
    and writes nothing."""
    with api_with(api_runs_per_minute="2") as api:
        operator = api.client(Role.OPERATOR)
        steps = [{"name": f"s{n}", "handler": "test.echo", "queue": "parked"} for n in range(3)]
        head = _head(api)
        refused = operator.post("/api/v1/workflows", json={"name": "three", "steps": steps})
        assert refused.status_code == 429, refused.text
        assert _head(api) == head
