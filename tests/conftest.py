"""Shared fixtures: every test session makes its own databases and removes them."""

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from jobledger.domain.ledger import Ledger
from jobledger.runtime.settings import Settings, load_settings
from jobledger.runtime.store import migrate, open_ledger

ADMIN_URL = os.environ.get(
    "JOBLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def services_required() -> bool:
    return bool(os.environ.get("JOBLEDGER_REQUIRE_SERVICES"))


def _missing(what: str, error: Exception) -> None:
    message = f"{what} is not reachable: {error}"
    if services_required():
        pytest.fail(f"{message} (JOBLEDGER_REQUIRE_SERVICES is set)")
    pytest.skip(message)


def _drop(admin: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _url_for(database: str) -> str:
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
            migrate(load_settings({}, database_url=_url_for(name)), progress=lambda _: None)
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
            yield _url_for(name)
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
