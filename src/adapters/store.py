"""The event store: which backend the settings select, and `jobledger migrate`."""

import contextlib
import fcntl
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from importlib import resources
from pathlib import Path

import psycopg
from eventsourcing.persistence import OperationalError, ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from jobledger.adapters.postgres.database import PostgresDatabase
from jobledger.adapters.postgres.event_tables import PostgresEventTables
from jobledger.adapters.postgres.log_store import PostgresLogStore
from jobledger.adapters.sqlite.database import SqliteDatabase
from jobledger.adapters.sqlite.event_tables import SqliteEventTables
from jobledger.adapters.sqlite.log_store import SqliteLogStore
from jobledger.domain.definitions import Limits
from jobledger.infra.errors import (
    SettingsError,
    StoreNotMigratedError,
    StoreUnavailableError,
)
from jobledger.infra.outages import POSTGRESQL
from jobledger.infra.settings import PREFIX, Settings, mask_url
from jobledger.infra.start_wait import StartWait
from jobledger.persistence.ledger import Ledger
from jobledger.projections.database import Database
from jobledger.projections.log.archive_store import EventTables

# Any fixed number; every jobledger process agrees on it.
_MIGRATE_LOCK_KEY = 0x6A6F626C
_ARCHIVE_LOCK_KEY = 0x6A6C6172
_TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS jobledger_migrations "
    "(name TEXT PRIMARY KEY, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)"
)

Progress = Callable[[str], None]

# The most connections of the event store's pool one process keeps (ADRs 51, 53, 55):
# the writer's, a worker's lease reads, the projector's three followers.
HELD_CONNECTIONS = 5
# How long one try to connect at start may take: a silent host is tried again soon.
PROBE_SECONDS = 2


def persistence_env(settings: Settings, *, create_table: bool = False) -> dict[str, str]:
    """The eventsourcing environment for the configured backend."""
    common = {"CREATE_TABLE": "y" if create_table else "n"}
    if settings.aggregate_cache_size:
        # Fast-forwarded on every get, so a cached aggregate is never stale.
        common["AGGREGATE_CACHE_MAXSIZE"] = str(settings.aggregate_cache_size)
    if not settings.uses_postgres:
        return {
            **common,
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(settings.sqlite_path),
            "SQLITE_LOCK_TIMEOUT": "30",
        }
    params = libpq_params(settings.database_url)
    return {
        **common,
        # eventsourcing's, with calls that find a frozen server out (ADR 79).
        "PERSISTENCE_MODULE": "jobledger.adapters.postgres.bounded:BoundedPostgresFactory",
        "POSTGRES_CHECK_AFTER": str(settings.database_timeout_ms / 1000),
        "POSTGRES_DBNAME": params["dbname"],
        "POSTGRES_HOST": params["host"],
        "POSTGRES_PORT": params["port"],
        "POSTGRES_USER": params["user"],
        "POSTGRES_PASSWORD": params["password"],
        # The connections kept open: one. The pool opens more as callers need them (up
        # to the size below) and closes those idle for ten minutes, so a quiet role
        # holds one or two connections, not the whole pool (a server's 100 slots are
        # shared by every process of every installation on it).
        "POSTGRES_POOL_SIZE": "1",
        # Up to the pool's size, and room beyond it for the connections a process keeps
        # for its hot paths (the writer's, a worker's lease reads, the projector's
        # followers): held, they must never leave the other callers without one.
        "POSTGRES_MAX_OVERFLOW": str(2 * settings.database_pool_size + HELD_CONNECTIONS - 1),
        # Despite its name, how long a call waits for one of the pool's connections:
        # no longer than a frozen server takes to be found out (ADR 79).
        "POSTGRES_CONNECT_TIMEOUT": str(max(1, round(2 * settings.database_timeout_ms / 1000))),
        "POSTGRES_LOCK_TIMEOUT": "10",
        # One empty query at checkout: after a server restart every pooled connection
        # is dead, and without it each would fail a call (a save's ten retries can all
        # draw dead ones, and the call fails although the server is back). The pool
        # asks only of a connection idle a while (``check_if_idle``).
        "POSTGRES_PRE_PING": "y",
    }


def libpq_params(url: str) -> dict[str, str]:
    """The URL's connection parameters, each one it leaves out as libpq would take it
    (``PGUSER`` or the OS user, ``PGDATABASE`` or the user's name, ``PGHOST`` or the
    local socket, ``PGPORT``, ``PGPASSWORD``): the event store, which needs each named,
    then connects as every other connection of the process does with the bare URL."""
    given = _postgres_params(url)
    defaults = {
        option.keyword.decode(): option.val.decode()
        for option in psycopg.pq.Conninfo.get_defaults()
        if option.val is not None
    }
    params = {key: given.get(key) or defaults.get(key, "") for key in _EVENT_STORE_PARAMS}
    # libpq's own fallbacks: the database named after the user; an empty host is the
    # local socket, in the folder the library was built with.
    params["dbname"] = params["dbname"] or params["user"]
    params["port"] = params["port"] or "5432"
    return params


_EVENT_STORE_PARAMS = ("dbname", "host", "port", "user", "password")


def _postgres_params(url: str) -> dict[str, str]:
    try:
        return {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except psycopg.ProgrammingError:
        # libpq's message may quote the password: say what to do instead.
        raise SettingsError(
            "JOBLEDGER_DATABASE_URL is malformed; use postgresql://user:password@host:5432/dbname"
            " and percent-encode special characters in the password"
        ) from None


def open_ledger(settings: Settings) -> Ledger:
    """A ledger on existing tables; it never creates them."""
    limits = Limits(
        max_payload_bytes=settings.max_payload_bytes,
        min_interval=timedelta(seconds=settings.min_interval_seconds),
    )
    ledger = _construct(settings, limits, create_table=False)
    try:
        ledger.recorder.max_notification_id()
        if ledger.snapshots is not None:
            # A store migrated by an older release has no snapshot table yet.
            list(ledger.snapshots.get(uuid.uuid4(), limit=1))
    except ProgrammingError:
        ledger.close()
        raise StoreNotMigratedError from None
    except OperationalError as error:
        ledger.close()
        if "no such table" in str(error):
            raise StoreNotMigratedError from None
        raise _unavailable(settings, error) from None
    return ledger


def _construct(settings: Settings, limits: Limits, *, create_table: bool) -> Ledger:
    env = persistence_env(settings, create_table=create_table)
    if settings.uses_postgres and (problem := _connect_problem(settings.database_url)):
        # Said at once, instead of after the pool's wait for a first connection.
        raise _unavailable(settings, problem)
    try:
        if not settings.uses_postgres:
            settings.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        store = PostgresLogStore if settings.uses_postgres else SqliteLogStore
        return Ledger(env, limits, store)
    except (OperationalError, OSError, psycopg.OperationalError) as error:
        raise _unavailable(settings, error) from None


def event_tables(settings: Settings, ledger: Ledger) -> EventTables:
    """The event store's tables as an archive works on them."""
    return PostgresEventTables(ledger) if settings.uses_postgres else SqliteEventTables(ledger)


def events_table(settings: Settings) -> str:
    """The table eventsourcing stores events in (named by the backend)."""
    return "jobledger_events" if settings.uses_postgres else "stored_events"


def _unavailable(settings: Settings, error: Exception | str) -> StoreUnavailableError:
    if not settings.uses_postgres:
        detail = _one_line(str(error))
        return StoreUnavailableError(
            f"cannot open the event store {settings.sqlite_path}: {detail}; "
            f"check that {PREFIX}DATA_DIR (or the sqlite:// path) is a folder you may write in"
        )
    # A pool only says it got no connection in time; one direct attempt says why.
    detail = (
        error if isinstance(error, str) else _connect_problem(settings.database_url)
    ) or _one_line(str(error))
    return StoreUnavailableError(
        f"cannot reach the event store ({PREFIX}DATABASE_URL={mask_url(settings.database_url)}):"
        f" {detail}; {_fix_for(detail)}"
    )


def wait_for_store(settings: Settings, wait: StartWait) -> None:
    """Wait for PostgreSQL to take a connection (SQLite is a local file: nothing to
    wait for); what it cannot wait out stops with the event store's one line."""
    if not settings.uses_postgres:
        return

    def probe() -> None:
        with psycopg.connect(settings.database_url, connect_timeout=PROBE_SECONDS):
            pass

    try:
        wait.until_reachable(POSTGRESQL, probe)
    except psycopg.Error as error:
        raise _unavailable(settings, _one_line(str(error))) from None


def _connect_problem(url: str) -> str | None:
    try:
        with psycopg.connect(url, connect_timeout=5):
            return None
    except psycopg.Error as error:
        return _one_line(str(error))


def _fix_for(detail: str) -> str:
    if "does not exist" in detail and "database" in detail:
        return "create that database (createdb NAME), or name an existing one in the URL"
    if "authentication" in detail or "password" in detail or "role" in detail:
        return "check the user and password in the URL"
    return "check that PostgreSQL runs at that host and port, and that it accepts connections"


def _one_line(text: str) -> str:
    # Driver messages span lines (a user error is one line) and may quote the URL.
    return mask_url(" ".join(text.split()))


def migrate(settings: Settings, progress: Progress = print) -> list[str]:
    """Create the event tables and apply new migrations; safe to run concurrently."""
    dialect = _dialect(settings)
    with _migration_lock(settings):
        ledger = _construct(settings, Limits(), create_table=True)
        ledger.close()
        progress(f"event tables ready ({dialect})")
        applied = _apply_sql_migrations(settings, dialect, progress)
    progress(f"migrations applied: {len(applied)} new")
    return applied


def check_migrated(settings: Settings) -> None:
    """Raise ``StoreNotMigratedError`` naming every migration of this release that the
    store has not applied: every role checks it at start, so none runs into a missing
    table or column later (where it would look like an outage, retried for ever)."""
    missing = missing_migrations(settings)
    if missing:
        raise StoreNotMigratedError(
            f"the event store misses {len(missing)} migration(s) of this release "
            f"({', '.join(missing)}); run `jobledger migrate` with the same settings "
            "(the release step), then start again"
        )


def missing_migrations(settings: Settings) -> list[str]:
    """The migration files of this release not recorded as applied, in order."""
    applied = _applied_migrations(settings)
    return [name for name, _ in migration_files(_dialect(settings)) if name not in applied]


def _applied_migrations(settings: Settings) -> set[str]:
    query = "SELECT name FROM jobledger_migrations"
    if settings.uses_postgres:
        with _pg_connect(settings) as conn:
            try:
                return {str(row[0]) for row in conn.execute(query)}
            except psycopg.errors.UndefinedTable:
                return set()
    with contextlib.closing(sqlite3.connect(settings.sqlite_path)) as conn:
        try:
            return {str(row[0]) for row in conn.execute(query)}
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return set()
            raise _unavailable(settings, error) from None


def _dialect(settings: Settings) -> str:
    return "postgres" if settings.uses_postgres else "sqlite"


def migration_files(dialect: str) -> list[tuple[str, str]]:
    folder = resources.files("jobledger.migrations") / dialect
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name, f.read_text(encoding="utf-8")) for f in files]


@contextlib.contextmanager
def _migration_lock(settings: Settings) -> Iterator[None]:
    if settings.uses_postgres:
        with _pg_connect(settings) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATE_LOCK_KEY,))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATE_LOCK_KEY,))
        return
    lock_path = Path(f"{settings.sqlite_path}.migrate.lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("w")
    except OSError as error:
        raise _unavailable(settings, error) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pg_connect(settings: Settings) -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(settings.database_url, autocommit=True, connect_timeout=5)
    except psycopg.Error as error:
        raise _unavailable(settings, error) from None


def _apply_sql_migrations(settings: Settings, dialect: str, progress: Progress) -> list[str]:
    applied: list[str] = []
    if settings.uses_postgres:
        with _pg_connect(settings) as conn:
            conn.execute(_TRACKING_DDL)
            done = {row[0] for row in conn.execute("SELECT name FROM jobledger_migrations")}
            for name, sql in migration_files(dialect):
                if name not in done:
                    with conn.transaction():
                        conn.execute(sql.encode())
                        conn.execute("INSERT INTO jobledger_migrations (name) VALUES (%s)", (name,))
                    progress(f"applied {name}")
                    applied.append(name)
        return applied
    with contextlib.closing(sqlite3.connect(settings.sqlite_path, isolation_level=None)) as conn:
        conn.execute(_TRACKING_DDL)
        done = {row[0] for row in conn.execute("SELECT name FROM jobledger_migrations")}
        for name, sql in migration_files(dialect):
            if name not in done:
                _apply_sqlite_file(conn, name, sql)
                progress(f"applied {name}")
                applied.append(name)
    return applied


def _apply_sqlite_file(conn: sqlite3.Connection, name: str, sql: str) -> None:
    # executescript commits a pending transaction first, so BEGIN goes inside the script.
    try:
        conn.executescript("BEGIN IMMEDIATE;\n" + sql)
        conn.execute("INSERT INTO jobledger_migrations (name) VALUES (?)", (name,))
        conn.execute("COMMIT")
    except sqlite3.Error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def read_store_id(settings: Settings) -> str:
    """The id `jobledger migrate` gave this event store."""
    query = "SELECT store_id FROM jobledger_store"
    if settings.uses_postgres:
        with _pg_connect(settings) as conn:
            row = conn.execute(query).fetchone()
    else:
        with contextlib.closing(sqlite3.connect(settings.sqlite_path)) as conn:
            try:
                row = conn.execute(query).fetchone()
            except sqlite3.OperationalError:
                raise StoreNotMigratedError from None
    if row is None:
        raise StoreNotMigratedError
    return str(row[0])


def projection_database(settings: Settings) -> Database:
    """The database the projection tables live in: the event store's own."""
    if settings.uses_postgres:
        # Sized like the event store's pool: the API's requests, sessions and the
        # in-process followers all draw on it.
        check_after = settings.database_timeout_ms / 1000
        return PostgresDatabase(
            settings.database_url,
            max_size=settings.database_pool_size,
            # A request waits for a connection no longer than a frozen server takes to
            # be found out, so it hears 503 as soon (ADR 79).
            wait=2 * check_after,
            check_after=check_after,
        )
    return SqliteDatabase(settings.sqlite_path)


@contextlib.contextmanager
def archive_lock(settings: Settings) -> Iterator[bool]:
    """Held by one archive run at a time (True), or by another already (False): a
    PostgreSQL session lock, or a lock file beside the SQLite store. Either goes with
    the process that holds it, however it ends."""
    if settings.uses_postgres:
        with _pg_connect(settings) as conn:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (_ARCHIVE_LOCK_KEY,)).fetchone()
            yield bool(row and row[0])
        return
    lock_path = Path(f"{settings.sqlite_path}.archive.lock")
    with lock_path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
