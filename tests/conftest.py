"""Shared fixtures: every test session makes its own databases and removes them."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, Self

import psycopg
import pytest
import redis
import uvicorn
from hypothesis import strategies as st
from litestar import Litestar
from psycopg import sql
from tests.ports import free_port

from jobledger.adapters.store import migrate, open_ledger
from jobledger.api.server import server_config
from jobledger.domain.roles import Role
from jobledger.infra.settings import Settings, load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.queue.backend import WorkSpec
from jobledger.services.actors import Actor

ADMIN_URL = os.environ.get(
    "JOBLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


# Passwords are hashed at argon2's least cost in the tests: the default cost, 0.2 s of
# CPU a hash, times the users and sign-ins the tests make, would add minutes of CPU.
CHEAP_PASSWORDS = {
    "password_time_cost": "1",
    "password_memory_kib": "8",
    "password_parallelism": "1",
}


def actor(name: str = "test") -> Actor:
    """Someone with every right, for tests that act on the log through the use cases."""
    return Actor(name, Role.ADMIN)


def services_required() -> bool:
    return bool(os.environ.get("JOBLEDGER_REQUIRE_SERVICES"))


def missing_service(message: str) -> NoReturn:
    """A server or program a test needs is absent: fail where every service is required
    (CI), skip elsewhere."""
    if services_required():
        pytest.fail(f"{message} (JOBLEDGER_REQUIRE_SERVICES is set)")
    pytest.skip(message)


def _missing(what: str, error: Exception) -> NoReturn:
    missing_service(f"{what} is not reachable: {error}")


def _drop(admin: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def database_url(database: str) -> str:
    """The URL of ``database`` on the test server, as the admin connects."""
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated database that per-test databases are copied from."""
    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        _missing("PostgreSQL", error)
        raise
    name = f"jobledger_tpl_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            migrate(load_settings({}, database_url=database_url(name)), progress=lambda _: None)
            yield name
        finally:
            _drop(admin, name)


@contextlib.contextmanager
def _database_copy(template: str) -> Iterator[str]:
    name = f"jobledger_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        try:
            yield database_url(name)
        finally:
            _drop(admin, name)


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    with _database_copy(postgres_template) as url:
        yield url


@pytest.fixture(scope="module")
def module_postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated database shared by the tests of one module."""
    with _database_copy(postgres_template) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'events.sqlite3'}"
    migrate(load_settings({}, database_url=url), progress=lambda _: None)
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings for a fresh, migrated store on each backend."""
    url = request.getfixturevalue(f"{request.param}_url")
    return load_settings({}, database_url=url, data_dir=str(tmp_path))


@pytest.fixture
def ledger(store_settings: Settings) -> Iterator[Ledger]:
    ledger = open_ledger(store_settings)
    yield ledger
    ledger.close()


# ---- a private redis-server ------------------------------------------------------

_START_TIMEOUT = 10.0


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else "(no log)"


def _wait_for_ping(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"redis-server exited with {process.returncode}: {_tail(log)}")
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            time.sleep(0.05)
        finally:
            client.close()
    pytest.fail(f"redis-server did not answer PING within {_START_TIMEOUT} s: {_tail(log)}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a private redis-server, started for this session and stopped after."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_service("redis-server is not installed")
    workdir = tmp_path_factory.mktemp("redis")
    log = workdir / "redis.log"
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    args = [binary, "--save", "", "--appendonly", "no", "--port", str(port)]
    args += ["--bind", "127.0.0.1", "--dir", str(workdir), "--logfile", str(log)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # noqa: S603 (a fixed argument list, no shell)
    try:
        _wait_for_ping(url, process, log)
        yield url
    finally:
        _stop(process)


# ---- an app served over real HTTP --------------------------------------------------


class LiveServer:
    """uvicorn serving ``app`` from a thread, on a socket bound before it starts, as
    `jobledger api` serves it."""

    def __init__(self, app: Litestar) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        host, port = self._socket.getsockname()
        self.url = f"http://{host}:{port}"
        config = server_config(app)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                pytest.fail("the API server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


@pytest.fixture(scope="session")
def live_server() -> type[LiveServer]:
    """Serves an ASGI app over real HTTP from a thread: ``with live_server(app) as s``."""
    return LiveServer


# ---- the command as a child process ----------------------------------------------


class JobledgerCli:
    """Runs `python -m jobledger.cli` as a child process, with none of this machine's
    jobledger settings leaking in from the environment."""

    command = (sys.executable, "-m", "jobledger.cli")

    @staticmethod
    def environment(**settings: str) -> dict[str, str]:
        """This environment without jobledger settings, plus ``settings`` (by field name).
        The test handlers are on (the tests run jobs of ``test.*``) and passwords are
        cheap to hash unless ``settings`` says otherwise."""
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("JOBLEDGER_") and k not in {"ADMIN_USERNAME", "ADMIN_PASSWORD"}
        }
        settings = {"test_handlers": "true", **CHEAP_PASSWORDS} | settings
        return environ | {f"JOBLEDGER_{k.upper()}": v for k, v in settings.items()}

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run to the end; ``env`` adds variables to the clean environment."""
        return subprocess.run(  # noqa: S603 (our own entry point, fixed arguments)
            [*self.command, *args],
            env=self.environment() | dict(env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="session")
def jobledger_cli() -> JobledgerCli:
    return JobledgerCli()


class JsonValues:
    """Hypothesis strategies for JSON-shaped payloads, and the queue's spec around one."""

    @staticmethod
    def payloads(
        integers: st.SearchStrategy[int], floats: st.SearchStrategy[float]
    ) -> st.SearchStrategy[dict[str, Any]]:
        scalars = st.none() | st.booleans() | integers | floats | st.text(max_size=12)
        values = st.recursive(
            scalars,
            lambda children: (
                st.lists(children, max_size=4)
                | st.dictionaries(st.text(max_size=6), children, max_size=4)
            ),
            max_leaves=25,
        )
        return st.dictionaries(st.text(max_size=6), values, max_size=4)

    @staticmethod
    def work_spec(payload: dict[str, Any]) -> WorkSpec:
        return WorkSpec(
            job_id=None,
            handler="test.echo",
            payload=payload,
            timeout=timedelta(seconds=5),
            max_attempts=1,
        )


@pytest.fixture(scope="session")
def json_values() -> type[JsonValues]:
    return JsonValues
