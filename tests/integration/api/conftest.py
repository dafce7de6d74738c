"""A real HTTP server for API tests: the Litestar app under uvicorn on a free port,
over PostgreSQL and a private Redis, with one user and one API token per role."""

import contextlib
import functools
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.conftest import CHEAP_PASSWORDS

from jobledger.bootstrap import Container, bootstrap, web_app
from jobledger.domain.roles import Role
from jobledger.infra.settings import load_settings
from jobledger.runtime.lifecycle import WorkerRunner

if TYPE_CHECKING:
    from tests.conftest import LiveServer

PASSWORD = "correct horse battery staple"


@dataclass
class Api:
    """The running API, its container, and a Bearer-token client per role."""

    url: str
    container: Container
    tokens: dict[Role, str]
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, role: Role | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self.clients.append(client)
        return client

    def session(self, username: str, password: str = PASSWORD) -> httpx.Client:
        """A browser-like client: signed in with a cookie, sending its CSRF token."""
        client = httpx.Client(base_url=self.url, timeout=30)
        self.clients.append(client)
        response = client.post(
            "/api/v1/auth/login", json={"username": username, "password": password}
        )
        assert response.status_code == 200, response.text
        client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
        return client

    def wait_for(self, condition: Callable[[], bool], timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"not within {timeout} s")
            time.sleep(0.05)


@contextlib.contextmanager
def serve_api(
    database_url: str, redis_url: str, live_server: type["LiveServer"], **extra: str
) -> Iterator[Api]:
    """The API over a migrated database, with its projector running; ``extra`` settings
    by field name."""
    chosen = {
        "test_handlers": "true",
        "database_url": database_url,
        "redis_url": redis_url,
        "redis_prefix": f"a{uuid.uuid4().hex[:8]}",
        "projection_poll_ms": "50",
        **CHEAP_PASSWORDS,
    }
    settings = load_settings({}, **(chosen | extra))
    with bootstrap(settings) as container:
        accounts = container.accounts()
        now = datetime.now(tz=UTC)
        tokens = {}
        existing = {user.username: user for user in accounts.list_users()}
        for role in Role:
            # A second API on the same database (another setting) keeps the users.
            user = existing.get(str(role)) or accounts.create_user(
                str(role), PASSWORD, role, now=now
            )
            _, secret = accounts.create_token(
                user.id, f"{role} token", role, expires_at=None, now=now
            )
            tokens[role] = secret
        projector = container.projector()
        projector.start()
        try:
            with live_server(web_app(container)) as server:
                api = Api(server.url, container, tokens)
                yield api
                for client in api.clients:
                    client.close()
        finally:
            projector.stop()


@contextlib.contextmanager
def worker_for(api: Api) -> Iterator[Api]:
    """A worker on the API's stores, running until the block ends."""
    runner = WorkerRunner(api.container.worker())
    runner.start()
    try:
        yield api
    finally:
        runner.stop()


@pytest.fixture
def served(postgres_url: str, redis_server: str, live_server: type["LiveServer"]) -> Iterator[Api]:
    """The API with a worker of the default queue, listed live before the test starts."""
    with serve_api(postgres_url, redis_server, live_server) as api, worker_for(api):
        presence = api.container.presence
        listed = timedelta(seconds=30)
        api.wait_for(lambda: bool(presence.live(now=datetime.now(UTC), stale_after=listed)))
        yield api


@pytest.fixture
def api(postgres_url: str, redis_server: str, live_server: type["LiveServer"]) -> Iterator[Api]:
    with serve_api(postgres_url, redis_server, live_server) as served:
        yield served


@pytest.fixture
def api_with(
    postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Callable[..., contextlib.AbstractContextManager[Api]]:
    """``with api_with(setting=value) as api``: an API with other settings (by field)."""
    return functools.partial(serve_api, postgres_url, redis_server, live_server)


@pytest.fixture(scope="module")
def module_api(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator[Api]:
    """One API for a whole module (the schema-driven tests make many requests)."""
    with serve_api(module_postgres_url, redis_server, live_server) as served:
        yield served


@pytest.fixture
def api_without_redis(postgres_url: str, live_server: type["LiveServer"]) -> Iterator[Api]:
    """The API over a migrated database, its Redis URL pointing where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with serve_api(postgres_url, f"redis://127.0.0.1:{port}/0", live_server) as served:
        yield served
