"""The client's surface: what importing it loads, and one method set for both clients."""

import asyncio
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from jobledger.client import (
    AsyncClient,
    Client,
    NotVisibleYetError,
    ServerError,
    ValidationError,
)
from jobledger.client.errors import error_from
from jobledger.client.transport import Retrying
from jobledger.client.workflows import AsyncWorkflows, Workflows

SERVER_SIDE = (
    "litestar",
    "eventsourcing",
    "psycopg",
    "psycopg_pool",
    "redis",
    "croniter",
    "structlog",
    "uvicorn",
    "jobledger.api",
    "jobledger.services",
    "jobledger.runtime",
    "jobledger.projections",
    "jobledger.persistence",
)


def test_importing_the_client_loads_none_of_the_server() -> None:
    """If a program imports jobledger.client (and jobledger, to declare handlers), then
    no web framework, database driver, event store or server module is loaded."""
    probe = "import json, sys, jobledger, jobledger.client; print(json.dumps(sorted(sys.modules)))"
    output = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(output)
    assert "httpx" in loaded
    assert "msgspec" in loaded
    assert [m for m in loaded if m.split(".")[0] in SERVER_SIDE or m.startswith(SERVER_SIDE)] == []


def _public(kind: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in vars(kind).items()
        if callable(member) and not name.startswith("_") and name not in {"close", "send"}
    }


def test_both_clients_offer_the_same_methods_with_the_same_parameters() -> None:
    """If a method is on Client, then AsyncClient has it too, with the same parameters,
    as a coroutine (or an async iterator for iter_*)."""
    blocking, awaiting = _public(Client), _public(AsyncClient)
    assert set(blocking) == set(awaiting)
    assert len(blocking) > 25
    for name, method in blocking.items():
        twin = awaiting[name]
        assert inspect.signature(method).parameters == inspect.signature(twin).parameters, name
        if not name.startswith("iter_"):
            assert inspect.iscoroutinefunction(twin), name


def test_both_clients_offer_the_same_workflow_calls() -> None:
    """If a workflow call is on ``Client.workflows``, then ``AsyncClient.workflows`` has
    it too, with the same parameters, as a coroutine; create, get and wait among them."""
    blocking, awaiting = _public(Workflows), _public(AsyncWorkflows)
    assert set(blocking) == set(awaiting)
    assert {"create", "get", "wait", "cancel", "history"} <= set(blocking)
    for name, method in blocking.items():
        twin = awaiting[name]
        assert inspect.signature(method).parameters == inspect.signature(twin).parameters, name
        assert inspect.iscoroutinefunction(twin), name
    with Client("http://127.0.0.1:9", "jl_x") as client:
        assert isinstance(client.workflows, Workflows)
    awaiting_client = AsyncClient("http://127.0.0.1:9", "jl_x")
    assert isinstance(awaiting_client.workflows, AsyncWorkflows)
    asyncio.run(awaiting_client.close())


def test_retries_back_off_honour_retry_after_and_end() -> None:
    """If a try fails, then the next waits a jittered back-off that doubles up to its
    ceiling, at least the server's Retry-After (capped), and after the last retry none."""
    retrying = Retrying(retries=3, backoff=0.2, max_backoff=0.5)
    for attempt, ceiling in enumerate((0.2, 0.4, 0.5)):
        pause = retrying.pause(attempt)
        assert pause is not None
        assert 0 <= pause <= ceiling
    assert retrying.pause(0, "7") == 7.0
    assert retrying.pause(0, "3600") == 30.0
    assert retrying.pause(3) is None


def test_an_error_answer_becomes_the_exception_of_its_kind() -> None:
    """If the API answers with its error body, then the exception is the one of the
    status (or of a finer code) and carries the message, field and fix; an answer
    without that body still names the status."""
    body = (
        b'{"error": {"status": 422, "code": "invalid", "message": "m", "field": "f", "fix": "x"}}'
    )
    invalid = error_from(422, body)
    assert isinstance(invalid, ValidationError)
    assert (invalid.message, invalid.field, invalid.fix, str(invalid)) == ("m", "f", "x", "m; x")
    later = b'{"error": {"status": 404, "code": "not_visible_yet", "message": "soon"}}'
    assert isinstance(error_from(404, later), NotVisibleYetError)
    bare = error_from(502, b"<html>bad gateway</html>")
    assert isinstance(bare, ServerError)
    assert "502" in bare.message
    assert "JOBLEDGER_TOKEN" in str(error_from(401, b""))


def test_a_clients_repr_hides_its_token() -> None:
    """If a client, its connection or its target is printed, logged or formatted, then
    the token is shown as ``***`` and the URL as it is."""
    secret = "jl_" + "s3cr3t" * 7
    with Client("http://jobledger.example:8000", token=secret) as client:
        connection = client.connection
        for shown in (repr(connection), str(connection), repr(connection.target), f"{client!r}"):
            assert secret not in shown
        assert "token='***'" in repr(connection)
        assert "http://jobledger.example:8000" in repr(connection.target)
    anonymous = AsyncClient("http://jobledger.example:8000")
    assert "token=None" in repr(anonymous.connection)
    asyncio.run(anonymous.close())
