"""The event stores the port suites share within a module: one migrated PostgreSQL
database and one migrated SQLite file per module (a test makes tables and keys of
its own in them), so that a suite pays for a store once, not once a test."""

from collections.abc import Iterator

import pytest
from tests.integration.ports.backends import STORES

from jobledger.adapters.store import migrate, projection_database
from jobledger.infra.settings import Settings, load_settings
from jobledger.projections.database import Database


@pytest.fixture(scope="module")
def module_sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite store shared by the tests of one module."""
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'events.sqlite3'}"
    migrate(load_settings({}, database_url=url), progress=lambda _: None)
    return url


@pytest.fixture(scope="module", params=STORES)
def module_store(request: pytest.FixtureRequest) -> Settings:
    """Settings of a migrated store on each backend, shared by the tests of one module."""
    url: str = request.getfixturevalue(f"module_{request.param}_url")
    return load_settings({}, database_url=url)


@pytest.fixture(scope="module")
def module_database(module_store: Settings) -> Iterator[Database]:
    """The projection database of ``module_store``."""
    database = projection_database(module_store)
    yield database
    database.close()
