"""jobledger behind PgBouncer (Debian's package) in session pooling, the mode in which
LISTEN/NOTIFY and psycopg's prepared statements work: the roles run, and the followers
are woken by the log's channel through it."""

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from tests.conftest import missing_service
from tests.integration.conftest import Harness, harness_settings, running_harness
from tests.ports import free_port

from jobledger.domain.execution import ExecutionStatus

# Role processes on the shared PostgreSQL: one such module at a time (its connections).
pytestmark = pytest.mark.xdist_group("roles")


@pytest.fixture
def pgbouncer(postgres_url: str, tmp_path: Path) -> Iterator[str]:
    """A private PgBouncer in session mode in front of the test's database; its URL."""
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if binary is None:
        missing_service("pgbouncer is not installed (make pgbouncer installs Debian's)")
    target = urlsplit(postgres_url)
    database = target.path.lstrip("/")
    port = free_port()
    config = tmp_path / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n{database} = host={target.hostname} port={target.port or 5432} "
        f"dbname={database} user={target.username}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        # The server side checks nobody (trust on loopback): PgBouncer logs in as the
        # database line's user, whatever the client gives.
        "auth_type = any\npool_mode = session\n"
        "max_client_conn = 200\ndefault_pool_size = 60\n"
    )
    config.chmod(0o644)
    # PgBouncer refuses to run as root: as root, it reads its file and becomes postgres.
    user = ["-u", "postgres"] if _is_root() else []
    process = subprocess.Popen(  # noqa: S603 (a fixed argument list)
        [binary, *user, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = urlunsplit(target._replace(netloc=f"{target.username}@127.0.0.1:{port}"))
    try:
        _until_accepting(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def _is_root() -> bool:
    return os.geteuid() == 0


def _until_accepting(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                error = process.stderr.read().decode() if process.stderr else ""
                pytest.fail(f"pgbouncer did not start: {error}")
            time.sleep(0.1)
        else:
            return


@pytest.mark.timeout(120)
def test_the_roles_run_behind_pgbouncer_in_session_mode(pgbouncer: str, redis_server: str) -> None:
    """If every connection goes through PgBouncer in session pooling, then the projector
    and the scheduler listen on the log's channel through it, a worker process leases
    and completes runs, each ends completed once, and the server still sees each
    connection's role in its application_name."""
    settings = harness_settings(pgbouncer, redis_server)
    with running_harness(settings) as harness:
        harness.start_worker()
        runs = [harness.run("test.echo", n=n) for n in range(20)]
        harness.wait_for_all(runs, ExecutionStatus.COMPLETED, timeout=60)
        assert harness.scheduler is not None
        releases = harness.scheduler.scheduler.releases
        assert releases is not None
        Harness.wait_for(lambda: releases.listening, timeout=10)
        with psycopg.connect(settings.database_url) as conn:
            names = {
                str(name)
                for (name,) in conn.execute(
                    "SELECT application_name FROM pg_stat_activity "
                    "WHERE datname = current_database()"
                )
            }
        # The worker process names its connections; PgBouncer passes the name on.
        assert any(name.startswith("jobledger-worker@") for name in names), names
        for run in runs:
            events = [type(e).__name__ for e in harness.events(run.id)]
            assert events.count("Completed") == 1, events
