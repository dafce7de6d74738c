"""The long-poll: GET /api/v1/executions/{id}?wait=S answers when the run finishes or
after S seconds, for many waiters at once, without a thread per waiter."""

import asyncio
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable

    from tests.integration.api.conftest import Api

WAITERS = 200


def _enqueue(api: "Api", count: int) -> list[str]:
    """``count`` runs that stay pending (no worker runs here), saved at once, once the
    read model shows them."""
    executions = [
        Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo"),
            ready_at=datetime.now(tz=UTC),
            trigger=Trigger.ADHOC,
            trigger_key=uuid.uuid4().hex,
        )
        for _ in range(count)
    ]
    api.container.ledger.save_all(*executions)
    client = api.client(Role.VIEWER)
    last = executions[-1].id
    api.wait_for(lambda: client.get(f"/api/v1/executions/{last}").status_code == 200)
    return [str(execution.id) for execution in executions]


def _cancel_all(api: "Api", ids: list[str]) -> None:
    """Cancel every one of these runs, in one save."""
    ledger = api.container.ledger
    executions = [ledger.get_execution(uuid.UUID(i)) for i in ids]
    for execution in executions:
        execution.cancel(by="operator", reason="test")
    ledger.save_all(*executions)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_many_waiters_hold_no_thread_each_and_all_hear_the_end(
    api_with: "Callable[..., contextlib.AbstractContextManager[Api]]",
) -> None:
    """If 200 clients long-poll 200 pending runs at once (with a credential allowed
    that many), then the server holds no thread per waiter (its thread count barely
    moves and other requests are served meanwhile), and every waiter answers soon
    after its run is cancelled, long before its wait is over."""
    with api_with(api_long_polls=str(WAITERS)) as api:
        _many_waiters(api)


def _many_waiters(api: "Api") -> None:
    ids = _enqueue(api, WAITERS)
    headers = {"Authorization": f"Bearer {api.tokens[Role.VIEWER]}"}

    async def scenario() -> tuple[list[httpx.Response], int, int, float]:
        limits = httpx.Limits(max_connections=WAITERS + 10)
        options: dict[str, Any] = {"base_url": api.url, "headers": headers, "limits": limits}
        # A burst first, as many as the waiters and down the same route: the server's
        # pools of threads (every request's credential check runs on one, a detail's
        # first read on another) reach their size before the count. Its connections
        # are closed after it: kept, a waiter could take one the server is closing at
        # the end of its keep-alive.
        async with httpx.AsyncClient(timeout=60, **options) as warming:
            burst = [warming.get(f"/api/v1/executions/{i}") for i in ids]
            burst += [warming.get("/api/v1/jobs") for _ in range(10)]
            assert {r.status_code for r in await asyncio.gather(*burst)} == {200}
        async with httpx.AsyncClient(timeout=60, **options) as client:
            threads_before = threading.active_count()
            waiting = [
                asyncio.create_task(client.get(f"/api/v1/executions/{i}", params={"wait": 45}))
                for i in ids
            ]
            await asyncio.sleep(1.5)
            assert not any(task.done() for task in waiting)
            threads_while = threading.active_count()
            other = await client.get("/api/v1/jobs")
            assert other.status_code == 200
            assert not any(task.done() for task in waiting)
            started = time.monotonic()
            await asyncio.to_thread(_cancel_all, api, ids)
            answers = await asyncio.gather(*waiting)
            return answers, threads_while - threads_before, len(answers), time.monotonic() - started

    answers, more_threads, count, elapsed = asyncio.run(scenario())
    assert count == WAITERS
    assert more_threads < 10
    assert all(a.status_code == 200 for a in answers)
    assert {a.json()["execution"]["status"] for a in answers} == {"cancelled"}
    assert elapsed < 40  # well within the 45 s wait: woken, not timed out


def test_a_wait_ends_after_its_seconds_with_the_run_as_it_is(api: "Api") -> None:
    """If a client waits on a run that does not finish, then the answer comes after the
    wait, with the run still pending; a finished run answers at once."""
    (pending,) = _enqueue(api, 1)
    client = api.client(Role.VIEWER)
    started = time.monotonic()
    response = client.get(f"/api/v1/executions/{pending}", params={"wait": 1})
    assert time.monotonic() - started >= 1
    assert response.status_code == 200
    assert response.json()["execution"]["status"] == "pending"
    _cancel_all(api, [pending])
    api.wait_for(
        lambda: (
            client.get(f"/api/v1/executions/{pending}").json()["execution"]["status"] == "cancelled"
        )
    )
    started = time.monotonic()
    done = client.get(f"/api/v1/executions/{pending}", params={"wait": 30})
    assert done.json()["execution"]["status"] == "cancelled"
    assert time.monotonic() - started < 10


def test_a_wait_for_nothing_or_too_long_is_refused(api: "Api") -> None:
    """If a client waits on an id the log does not have, then it gets a 404 at once;
    a wait past the bound is a 400 naming it."""
    client = api.client(Role.VIEWER)
    missing = client.get(f"/api/v1/executions/{uuid.uuid4()}", params={"wait": 30})
    assert missing.status_code == 404
    too_long = client.get(f"/api/v1/executions/{uuid.uuid4()}", params={"wait": 61})
    assert too_long.status_code == 400
    assert too_long.json()["error"]["field"] == "wait"
