"""A database URL that leaves out the user or the database takes libpq's defaults, for
the event store as for every other connection: tried with a role that is not
``postgres`` and a database named only by ``PGDATABASE``."""

import contextlib
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from tests.conftest import ADMIN_URL, database_url

from jobledger.adapters.store import libpq_params, migrate
from jobledger.bootstrap import bootstrap
from jobledger.infra.settings import load_settings

pytestmark = [pytest.mark.postgres]


def test_a_url_without_user_or_database_takes_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the URL names only a host, then the user, database, port and password are
    those of PGUSER, PGDATABASE, PGPORT and PGPASSWORD; without PGDATABASE, the
    database is named after the user; without a host, the host is libpq's own."""
    monkeypatch.setenv("PGUSER", "alice")
    monkeypatch.setenv("PGDATABASE", "shop")
    monkeypatch.setenv("PGPORT", "6543")
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    assert libpq_params("postgresql://db.example/") == {
        "dbname": "shop",
        "host": "db.example",
        "port": "6543",
        "user": "alice",
        "password": "s3cret",
    }
    monkeypatch.delenv("PGDATABASE")
    monkeypatch.delenv("PGHOST", raising=False)
    params = libpq_params("postgresql:///")
    assert (params["dbname"], params["host"]) == ("alice", "")
    assert libpq_params("postgresql://bob:pw@h:5433/orders") == {
        "dbname": "orders",
        "host": "h",
        "port": "5433",
        "user": "bob",
        "password": "pw",
    }


@contextlib.contextmanager
def own_role() -> Iterator[tuple[str, str]]:
    """A login role that is not ``postgres`` and a database it owns, dropped after."""
    role = f"jl_role_{uuid.uuid4().hex[:10]}"
    database = f"jl_db_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(database), sql.Identifier(role)
            )
        )
        try:
            yield role, database
        finally:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def users_of(database: str) -> set[str]:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT usename FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return {str(name) for (name,) in rows}


def event_tables_in(database: str) -> bool:
    with psycopg.connect(database_url(database), autocommit=True) as connection:
        row = connection.execute("SELECT to_regclass('jobledger_events')").fetchone()
    return row is not None and row[0] is not None


def test_every_connection_of_a_bare_url_is_the_environments_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the URL names only the host and PGUSER / PGDATABASE name a role that is not
    ``postgres`` and its database, then the migration, the event store, the read
    models and the accounts all connect as that role to that database (where the
    event tables are made)."""
    host = psycopg.conninfo.conninfo_to_dict(ADMIN_URL).get("host") or "127.0.0.1"
    with own_role() as (role, database):
        monkeypatch.setenv("PGUSER", role)
        monkeypatch.setenv("PGDATABASE", database)
        settings = load_settings({}, database_url=f"postgresql://{host}/")
        migrate(settings, progress=lambda _: None)
        with bootstrap(settings) as container:
            container.read_models().step()
            assert container.accounts().list_users() == []
            container.ledger.recorder.max_notification_id()
            assert users_of(database) == {role}
        assert event_tables_in(database)
