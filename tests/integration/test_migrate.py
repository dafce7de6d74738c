"""`jobledger migrate`: idempotent, safe in parallel, and the only creator of tables."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from jobledger.adapters.store import events_table, migrate, migration_files, open_ledger
from jobledger.infra.errors import StoreNotMigratedError, StoreUnavailableError
from jobledger.infra.settings import Settings, load_settings


def _migrate_quietly(url: str) -> list[str]:
    return migrate(load_settings({}, database_url=url), progress=lambda _: None)


def _empty_postgres(postgres_url: str) -> str:
    """The per-test database is a migrated copy; empty it to start from nothing."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    return postgres_url


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    return _empty_postgres(request.getfixturevalue("postgres_url"))


def test_runtime_connections_never_create_tables(empty_url: str) -> None:
    """If the store was never migrated, then opening it fails and creates nothing."""
    settings = load_settings({}, database_url=empty_url)
    with pytest.raises(StoreNotMigratedError, match="jobledger migrate"):
        open_ledger(settings)
    assert _tables(settings) == set()


def test_migrate_is_idempotent(empty_url: str) -> None:
    """If migrate runs twice, then the second run applies nothing and changes nothing."""
    settings = load_settings({}, database_url=empty_url)
    dialect = "postgres" if settings.uses_postgres else "sqlite"
    first = _migrate_quietly(empty_url)
    assert first == [name for name, _ in migration_files(dialect)]
    store_id = _store_id(settings)
    assert _migrate_quietly(empty_url) == []
    assert _store_id(settings) == store_id
    expected = {events_table(settings), "jobledger_migrations", "jobledger_store"}
    assert expected <= _tables(settings)
    open_ledger(settings).close()


def test_two_processes_can_migrate_at_once(empty_url: str) -> None:
    """If two processes run migrate together, then both succeed and each file applies once."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    command = [sys.executable, "-m", "jobledger.cli", "--database-url", empty_url, "migrate"]
    processes = [
        subprocess.Popen(  # noqa: S603 (our own entry point, fixed arguments)
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    settings = load_settings({}, database_url=empty_url)
    dialect = "postgres" if settings.uses_postgres else "sqlite"
    for name, _ in migration_files(dialect):
        assert sum(f"applied {name}" in out for out, _ in outputs) == 1
    open_ledger(settings).close()


def test_an_unreachable_database_is_named() -> None:
    """If PostgreSQL cannot be reached, then the error names the setting."""
    settings = load_settings({}, database_url="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(StoreUnavailableError, match="JOBLEDGER_DATABASE_URL"):
        migrate(settings, progress=lambda _: None)


def _tables(settings: Settings) -> set[str]:
    if settings.uses_postgres:
        with psycopg.connect(settings.database_url) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
    else:
        if not settings.sqlite_path.exists():
            return set()
        with sqlite3.connect(settings.sqlite_path) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {str(row[0]) for row in rows}


def _store_id(settings: Settings) -> str:
    if settings.uses_postgres:
        with psycopg.connect(settings.database_url) as conn:
            row = conn.execute("SELECT store_id FROM jobledger_store").fetchone()
    else:
        with sqlite3.connect(settings.sqlite_path) as conn:
            row = conn.execute("SELECT store_id FROM jobledger_store").fetchone()
    assert row is not None
    return str(row[0])
