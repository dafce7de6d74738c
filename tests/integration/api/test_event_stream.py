"""The log as server-sent events through a real HTTP server on PostgreSQL and Redis:
live from now, resumed from a position, filtered by type and queue, within the
credential's long-polls, refused clearly when asked wrongly."""

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from tests.integration.api.conftest import Api

from jobledger.api.security import SESSION_COOKIE
from jobledger.domain.roles import Role
from jobledger.services.event_stream import RECHECK_SECONDS

STREAM = "/api/v1/events/stream"


@dataclass
class Message:
    position: int
    type: str
    data: dict[str, Any]


def messages(lines: Iterator[str]) -> Iterator[Message]:
    """The events of a stream's lines (comments and reconnect hints left out)."""
    fields: dict[str, str] = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
            continue
        if "data" in fields:
            data = json.loads(fields["data"])
            yield Message(int(fields["id"]), fields["event"], data)
        fields = {}


@contextlib.contextmanager
def opened(client: httpx.Client, **params: Any) -> Iterator[Iterator[Message]]:
    headers = params.pop("headers", {})
    with client.stream("GET", STREAM, params=params, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield messages(response.iter_lines())


def until(stream: Iterator[Message], found: Callable[[Message], bool]) -> list[Message]:
    """The messages up to the first one ``found`` holds for (within 20 s)."""
    seen: list[Message] = []
    deadline = time.monotonic() + 20
    for message in stream:
        seen.append(message)
        if found(message):
            return seen
        assert time.monotonic() < deadline, seen
    raise AssertionError(f"the stream ended; saw {seen}")


def run(client: httpx.Client, **body: Any) -> str:
    sent = client.post("/api/v1/executions", json={"handler": "test.echo", **body})
    assert sent.status_code == 202, sent.text
    return str(sent.json()["id"])


def test_a_stream_from_now_carries_new_events_and_resumes_by_position(api: Api) -> None:
    """If a viewer opens the stream and runs are then enqueued, then their events come
    in log order with their positions as ids; a stream resumed from the first one's id
    (Last-Event-ID) starts with the second, and one filtered by queue carries only
    that queue's runs."""
    viewer, operator = api.client(Role.VIEWER), api.client(Role.OPERATOR)
    with opened(viewer, types="ExecutionEnqueued") as stream:
        first = run(operator, queue="left")
        second = run(operator, queue="right")
        seen = until(stream, lambda m: m.data["aggregate_id"] == second)
    assert [m.data["aggregate_id"] for m in seen] == [first, second]
    assert seen[0].position < seen[1].position
    assert all(m.type == "ExecutionEnqueued" for m in seen)

    resumed = {"Last-Event-ID": str(seen[0].position)}
    with opened(viewer, types="ExecutionEnqueued", after=0, headers=resumed) as stream:
        assert next(stream).data["aggregate_id"] == second
    with opened(viewer, after=0, queue="right") as stream:
        only = until(stream, lambda m: m.data["aggregate_id"] == second)
    assert {m.data["aggregate_id"] for m in only} == {second}


def test_a_run_s_whole_life_streams_when_filtered_by_its_queue(api: Api) -> None:
    """If a run in a queue is enqueued and cancelled while a stream filtered by that
    queue is open, then both events come, the later one placed by the run's first."""
    viewer, operator = api.client(Role.VIEWER), api.client(Role.OPERATOR)
    with opened(viewer, queue="nightly") as stream:
        other = run(operator, queue="elsewhere")
        execution_id = run(operator, queue="nightly")
        cancelled = operator.post(f"/api/v1/executions/{execution_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        seen = until(stream, lambda m: m.type == "ExecutionCancelled")
    assert [(m.type, m.data["aggregate_id"]) for m in seen] == [
        ("ExecutionEnqueued", execution_id),
        ("ExecutionCancelled", execution_id),
    ]
    assert other not in {m.data["aggregate_id"] for m in seen}


@pytest.mark.parametrize(
    ("role", "headers", "status", "field"),
    [
        (None, {}, 401, None),
        (Role.VIEWER, {"Last-Event-ID": "yesterday"}, 400, "Last-Event-ID"),
    ],
)
def test_a_stream_asked_wrongly_is_refused_clearly(
    api: Api, role: Role | None, headers: dict[str, str], status: int, field: str | None
) -> None:
    """If the stream is asked for without a credential, or with a Last-Event-ID that is
    no position, then it is refused with the status and the field to fix."""
    answer = api.client(role).get(STREAM, headers=headers)
    assert answer.status_code == status, answer.text
    if field is not None:
        assert answer.json()["error"]["field"] == field


def test_each_open_stream_holds_one_of_the_credential_s_long_polls(
    api_with: Callable[..., contextlib.AbstractContextManager[Api]],
) -> None:
    """If a credential may hold one long-poll, then while its stream is open a second
    stream is refused with 429 and Retry-After, and once the first closes a new one
    opens."""
    with api_with(api_long_polls="1") as api:
        viewer = api.client(Role.VIEWER)
        with opened(viewer):
            second = api.client(Role.VIEWER).get(STREAM)
            assert second.status_code == 429, second.text
            assert "Retry-After" in second.headers
        api.wait_for(lambda: opens(viewer), timeout=5)  # released as the first closed


def opens(client: httpx.Client) -> bool:
    """Whether a stream opens now (it is closed again at once)."""
    with client.stream("GET", STREAM) as response:
        return response.status_code == 200


def test_a_stream_ends_soon_after_its_session_is_signed_out(api: Api) -> None:
    """If the session a stream was opened with signs out, then the stream ends within
    a few seconds (it asks every RECHECK_SECONDS), rather than at its five minutes."""
    session = api.session("viewer")
    with session.stream("GET", STREAM) as response:
        assert response.status_code == 200
        began = time.monotonic()
        out = api.session("viewer")  # another session of the same user: still signed in
        api.container.accounts().logout(session.cookies[SESSION_COOKIE])
        list(response.iter_lines())  # until the server ends it
        ended = time.monotonic() - began
    assert ended < RECHECK_SECONDS * 3, ended
    assert out.get("/api/v1/auth/me").status_code == 200
