"""Bad settings stop every production role at start, in one line that names the
setting and the fix, before anything is written; run as real processes."""

import contextlib
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from tests.ports import free_port

from jobledger.adapters.store import check_migrated, migrate, missing_migrations
from jobledger.infra.errors import StoreNotMigratedError
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

# A port nothing listens on: connecting is refused at once. A role waits for a store
# that is not up yet (tests/integration/test_start_wait.py); these say at once, with no
# wait, what it says after one.
CLOSED = "127.0.0.1:1"
NO_WAIT = {"start_timeout": "0"}
STRONG_PASSWORD = "correct horse battery staple"

# (role, settings that break it, what the line must name, what it must advise)
CASES = [
    (
        "worker",
        {"database_url": f"postgresql://app:topsecret@{CLOSED}/jobledger", **NO_WAIT},
        "JOBLEDGER_DATABASE_URL=postgresql://app:***@127.0.0.1:1/jobledger",
        "check that PostgreSQL runs",
    ),
    (
        "worker",
        {
            "database_url": f"postgresql://app@{CLOSED}/jobledger?sslmode=disable&password=topsecret",
            **NO_WAIT,
        },
        "JOBLEDGER_DATABASE_URL=postgresql://app@127.0.0.1:1/jobledger?sslmode=disable&password=***",
        "check that PostgreSQL runs",
    ),
    (
        "scheduler",
        {"redis_url": f"redis://{CLOSED}/0?password=topsecret", **NO_WAIT},
        "cannot reach Redis (JOBLEDGER_REDIS_URL=redis://127.0.0.1:1/0?password=***)",
        "check that redis-server runs",
    ),
    (
        "scheduler",
        {"database_url": "{postgres}_missing"},
        'database "',
        "createdb",
    ),
    (
        "projector",
        {"database_url": "postgresql://app@db:fivefour/jobledger"},
        "JOBLEDGER_DATABASE_URL: a port is not a number",
        "percent-encode special characters in the password",
    ),
    (
        "api",
        {"database_url": "mysql://db/jobledger"},
        "JOBLEDGER_DATABASE_URL: scheme 'mysql' is not supported",
        "use postgresql://",
    ),
    (
        "scheduler",
        {"redis_url": f"redis://{CLOSED}/0", **NO_WAIT},
        "cannot reach Redis (JOBLEDGER_REDIS_URL=redis://127.0.0.1:1/0)",
        "check that redis-server runs",
    ),
    (
        "worker",
        {"redis_url": "redis://cache:six/0"},
        "JOBLEDGER_REDIS_URL: the host or port cannot be read",
        "redis://:password@host:6379/0",
    ),
    (
        "worker",
        {"handlers": "report=acme_jobs.reports:send"},
        "JOBLEDGER_HANDLERS: cannot load handler 'report'",
        "check that the module is installed",
    ),
    (
        # The first start of the API would create the admin: it must not.
        "api",
        {"handlers": "report=acme_jobs.reports:send"},
        "JOBLEDGER_HANDLERS: cannot load handler 'report'",
        "check that the module is installed",
    ),
    (
        "projector",
        {"handlers": "acme_jobs.reports"},
        "JOBLEDGER_HANDLERS: cannot import module 'acme_jobs.reports'",
        "check that it is installed (or on PYTHONPATH)",
    ),
    (
        "worker",
        {"webhook_allow": "10.0.0.0/33"},
        "JOBLEDGER_WEBHOOK_ALLOW: '10.0.0.0/33'",
        "use e.g. 10.0.0.0/8",
    ),
    (
        "scheduler",
        {"leader_ttl_ms": "soon"},
        "JOBLEDGER_LEADER_TTL_MS: use 100 or more ms (default 3000); got 'soon'",
        "use 100 or more ms",
    ),
    (
        "worker",
        {"worker_queues": ","},
        "JOBLEDGER_WORKER_QUEUES: use one or more queue names",
        "comma-separated",
    ),
]


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=[f"{role}-{next(iter(bad))}-{n}" for n, (role, bad, _, _) in enumerate(CASES)],
)
def test_a_bad_setting_stops_the_role_in_one_line(
    case: tuple[str, dict[str, str], str, str],
    postgres_url: str,
    redis_server: str,
    jobledger_cli: "JobledgerCli",
) -> None:
    """If one setting is bad and the others good, then the role exits 2 at once with a
    single line naming the setting (secrets masked) and the fix, and writes nothing."""
    role, bad, named, fix = case
    settings = {
        "database_url": postgres_url,
        "redis_url": redis_server,
        "admin_password": STRONG_PASSWORD,
        "api_port": "1",  # never reached: it must fail before it listens
    }
    settings |= {k: v.replace("{postgres}", postgres_url) for k, v in bad.items()}
    result = jobledger_cli.run(role, env=jobledger_cli.environment(**settings), timeout=30)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jobledger: ")
    assert named in lines[0]
    assert fix in lines[0]
    assert "topsecret" not in result.stderr
    assert _written(postgres_url) == (0, 0)


def _written(url: str) -> tuple[int, int]:
    """(events in the log, user accounts)."""
    with psycopg.connect(url) as conn:
        events = conn.execute("SELECT count(*) FROM jobledger_events").fetchone()
        users = conn.execute("SELECT count(*) FROM jobledger_users").fetchone()
    assert events is not None
    assert users is not None
    return (int(events[0]), int(users[0]))


# The newest migration and what it adds: a store an older release migrated lacks both.
NEWEST = "0008_execution_attempt_budget.sql"
UNDO_NEWEST = "ALTER TABLE jobledger_rm_executions DROP COLUMN attempt_budget"


@pytest.mark.parametrize("role", ["api", "scheduler", "worker", "projector", "seed"])
def test_a_store_that_misses_a_migration_stops_every_role_in_one_line(
    role: str, postgres_url: str, redis_server: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If the store was migrated by an older release (the newest migration missing),
    then each role exits 2 at once with one line naming the missing migration and
    `jobledger migrate`, no traceback, and writes nothing."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(UNDO_NEWEST)
        conn.execute("DELETE FROM jobledger_migrations WHERE name = %s", (NEWEST,))
    settings = {
        "database_url": postgres_url,
        "redis_url": redis_server,
        "admin_password": STRONG_PASSWORD,
        "api_port": str(free_port()),
        "test_handlers": "true",
    }
    result = jobledger_cli.run(role, env=jobledger_cli.environment(**settings), timeout=30)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines == [lines[0]], result.stderr
    assert lines[0].startswith("jobledger: the event store misses 1 migration(s)")
    assert NEWEST in lines[0]
    assert "run `jobledger migrate`" in lines[0]
    assert _written(postgres_url) == (0, 0)


def test_the_start_check_names_every_missing_migration_on_sqlite(tmp_path: Path) -> None:
    """If a SQLite store has never been migrated, or misses some migrations, then the
    start check names each missing one, in order, and passes once all are applied."""
    settings = load_settings({}, data_dir=str(tmp_path))
    settings.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
    assert missing_migrations(settings)[:2] == [
        "0001_store_identity.sql",
        "0002_queue_checkpoint.sql",
    ]
    migrate(settings, progress=lambda _: None)
    check_migrated(settings)
    with contextlib.closing(sqlite3.connect(settings.sqlite_path)) as conn, conn:
        conn.execute("DELETE FROM jobledger_migrations WHERE name LIKE '0006%'")
    with pytest.raises(StoreNotMigratedError, match=r"0006_quarantine\.sql"):
        check_migrated(settings)
