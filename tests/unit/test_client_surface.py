"""The client's surface: what importing it loads, and one method set for both clients."""

import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from jobledger.client import AsyncClient, Client

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
