"""Archives as processes (ADR 45): `jobledger archive` killed with -9 at any moment
leaves the old state or the new, never events removed without their verified archive;
and an archive run beside the production roles under load archives nothing open,
leaves the followers and `queue verify` right, and audits answer from the archive."""

import contextlib
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Self

import httpx
import psycopg
import pytest
from tests.private_stores import PrivateCluster
from tests.roles import Deployment, admin_client, launch, wait_for, wait_until_serving

from jobledger.bootstrap import bootstrap
from jobledger.domain.clock import utc_now
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus, Trigger
from jobledger.infra.settings import Settings, load_settings
from jobledger.persistence.archive_files import data_path, read_events, verified
from jobledger.projections.log.archive_store import CLOSING_TOPICS

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

pytestmark = [pytest.mark.xdist_group("roles"), pytest.mark.postgres, pytest.mark.slow]

# Archives of 10 of these take a run a second or more: time for kills at varied moments.
RUNS = 1000
KILLS = 4
# (position, originator id, version, topic, state) of one stored event.
Row = tuple[int, str, int, str, bytes]


def stored_rows(database_url: str) -> dict[str, list[Row]]:
    """Every event of the log by stream, as stored."""
    streams: dict[str, list[Row]] = {}
    with psycopg.connect(database_url) as conn:
        query = (
            "SELECT notification_id, originator_id::text, originator_version, topic, state "
            "FROM jobledger_events ORDER BY notification_id"
        )
        for position, originator, version, topic, state in conn.execute(query):
            streams.setdefault(originator, []).append(
                (position, originator, version, topic, bytes(state))
            )
    return streams


def archived_index(database_url: str) -> dict[str, tuple[str, str]]:
    """Archived execution id -> (archive name, folder)."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT e.execution_id, a.name, a.location FROM jobledger_archived_executions e "
            "JOIN jobledger_archives a ON a.name = e.archive"
        ).fetchall()
    return {str(i): (str(name), str(location)) for i, name, location in rows}


def archived_rows(name: str, folder: str) -> dict[str, list[Row]]:
    """The events of one archive by stream, after verifying it against its manifest."""
    verified(Path(folder), name)
    streams: dict[str, list[Row]] = {}
    for e in read_events(data_path(Path(folder), name)):
        row = (e.position, str(e.originator_id), e.originator_version, e.topic, e.state)
        streams.setdefault(str(e.originator_id), []).append(row)
    return streams


def check_old_or_new(database_url: str, original: dict[str, list[Row]]) -> int:
    """Every stream of ``original`` is whole in the log, or gone from it and whole in a
    verified archive that the index names, never both and never neither. Returns how
    many are archived."""
    log = stored_rows(database_url)
    index = archived_index(database_url)
    archives: dict[tuple[str, str], dict[str, list[Row]]] = {}
    for stream_id, rows in original.items():
        if stream_id not in index:
            assert log.get(stream_id) == rows, (
                f"{stream_id} is neither whole in the log nor archived"
            )
            continue
        assert stream_id not in log, f"{stream_id} is archived and still in the log"
        where = index[stream_id]
        if where not in archives:
            archives[where] = archived_rows(*where)
        assert archives[where][stream_id] == rows
    return len(index)


def closed_log(settings: Settings, count: int) -> dict[str, list[Row]]:
    """``count`` completed executions saved in batches, followed by the read models and
    the checkpoint (whose positions hold the archive back); their streams as stored."""
    spec = ExecutionSpec(handler="test.echo", payload={"n": 1})
    with bootstrap(settings) as container:
        for start in range(0, count, 100):
            runs = []
            for n in range(start, min(start + 100, count)):
                run = Execution.enqueue(
                    spec=spec, ready_at=utc_now(), trigger=Trigger.ADHOC, trigger_key=f"k{n}"
                )
                lease = uuid.uuid4()
                run.lease(worker_id="w", lease_id=lease, lease_expires_at=utc_now())
                run.complete(lease_id=lease, duration=timedelta(seconds=1), result={"n": n})
                runs.append(run)
            container.ledger.save_all(*runs)
        projector = container.projector()
        try:
            read_models = projector.read_models
            assert read_models is not None
            for step in (projector.checkpoint.step, read_models.step):
                while step():
                    pass
        finally:
            projector.close()
    return stored_rows(settings.database_url)


class ArchiveProcess:
    """`jobledger archive` as a child process, its output in a file."""

    def __init__(
        self,
        cli: "JobledgerCli",
        environ: dict[str, str],
        logs: Path,
        before: datetime | None = None,
    ) -> None:
        self.log_path = logs
        self._log: IO[bytes] = logs.open("ab")
        cutoff = (before or utc_now()).isoformat()
        self.process = subprocess.Popen(  # noqa: S603 (our own entry point)
            [*cli.command, "archive", "--before", cutoff, "--force", "--reason", "a test"],
            env=environ,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._log.close()

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self.kill()


def one_more_archive(database_url: str, run: "ArchiveProcess") -> Callable[[], bool]:
    """A condition: an archive was recorded after this call, or ``run`` ended."""
    seen = archives_recorded(database_url)
    return lambda: run.process.poll() is not None or archives_recorded(database_url) > seen


def archives_recorded(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM jobledger_archives").fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def private_url(jobledger_cli: "JobledgerCli") -> Iterator[str]:
    """A migrated database on a PostgreSQL server of this test's own: the roles'
    connections do not count against the shared server's limit."""
    cluster = PrivateCluster()
    try:
        cluster.create()
        migrated = jobledger_cli.run("migrate", env={"JOBLEDGER_DATABASE_URL": cluster.url})
        assert migrated.returncode == 0, migrated.stderr
        yield cluster.url
    finally:
        cluster.remove()


def test_a_killed_archive_leaves_the_old_state_or_the_new(
    private_url: str, tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If `jobledger archive` is killed with -9 at varied moments of its run, then after
    each kill every execution is whole in the log or whole in a verified archive, and
    a last run archives the rest and removes the orphaned files."""
    folder = tmp_path / "archives"
    chosen = {
        "database_url": private_url,
        "data_dir": str(tmp_path / "data"),
    }
    extra = {"archive_dir": str(folder), "archive_batch": "10", "log_format": "json"}
    settings = load_settings({}, **chosen, **extra)
    original = closed_log(settings, RUNS)
    time.sleep(0.01)  # the cut-off lies after every close
    environ = jobledger_cli.environment(**chosen, **extra)
    rng = random.Random(20)
    kills, archived = 0, 0
    while kills < KILLS:
        run = ArchiveProcess(jobledger_cli, environ, tmp_path / "archive.log")
        try:
            wait_for(one_more_archive(private_url, run), "a batch committed", timeout=60)
            time.sleep(rng.uniform(0, 0.03))  # somewhere in the next batches' steps
        finally:
            finished = run.process.poll() is not None
            run.kill()
        now_archived = check_old_or_new(private_url, original)
        assert now_archived > archived
        archived = now_archived
        if finished:
            break
        kills += 1
    assert kills == KILLS, f"the runs ended before {KILLS} kills; archive more executions"
    # The last run only has to finish the job: in larger batches.
    environ = jobledger_cli.environment(**chosen, **(extra | {"archive_batch": "500"}))
    last = ArchiveProcess(jobledger_cli, environ, tmp_path / "archive.log")
    assert last.wait() == 0, (tmp_path / "archive.log").read_text()[-3000:]
    assert check_old_or_new(private_url, original) == len(original) == RUNS
    names = {p.name.split(".")[0] for p in folder.iterdir()}
    assert len(names) == archives_recorded(private_url)  # no orphan left
    assert not list(folder.glob("*.part"))


# ---- under load ---------------------------------------------------------------------


class Load:
    """Creates runs over HTTP until stopped: quick ones on the workers' queue, and
    some on a queue no worker serves (they stay pending: open)."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url
        self.quick: list[str] = []
        self.parked: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        with admin_client(self.api_url) as client:
            n = 0
            while not self._stop.wait(0.02):
                n += 1
                parked = n % 10 == 0
                body: dict[str, Any] = {"handler": "test.echo", "payload": {"n": n}}
                if parked:
                    body["queue"] = "parked"
                response = client.post("/api/v1/executions", json=body)
                if response.status_code != HTTPStatus.ACCEPTED:
                    self.failures.append(f"{response.status_code} {response.text}")
                    continue
                (self.parked if parked else self.quick).append(response.json()["id"])


@contextlib.contextmanager
def deployment_of(
    tmp_path: Path, jobledger_cli: "JobledgerCli", shared: dict[str, str]
) -> Iterator[Deployment]:
    deployment = Deployment()
    try:
        launch(deployment, shared, tmp_path, jobledger_cli, "scheduler1")
        wait_until_serving(deployment)
        yield deployment
    finally:
        for role in deployment.roles.values():
            role.stop()


@pytest.mark.redis
def test_an_archive_under_load_keeps_everything_right(
    private_url: str, redis_server: str, tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If an archive runs while the roles run and runs are being created, then nothing
    open is archived, what it archived reads back equal to the log's rows, the queue
    verifies, the followers catch up, and the API answers from the archive."""
    folder = tmp_path / "archives"
    shared = {
        "database_url": private_url,
        "redis_url": redis_server,
        "redis_prefix": f"r{uuid.uuid4().hex[:8]}",
        "data_dir": str(tmp_path / "data"),
        "projection_poll_ms": "100",
        "archive_dir": str(folder),
        "archive_batch": "40",
        "log_format": "json",
    }
    environ = jobledger_cli.environment(**shared)
    with deployment_of(tmp_path, jobledger_cli, shared) as deployment:
        with Load(deployment.api_url) as load:
            wait_for(lambda: len(load.quick) >= 150, "runs created and run", timeout=60)
            cutoff = utc_now()
            time.sleep(1)  # a run closed before the cut-off has committed all its events
            before = stored_rows(private_url)
            run = ArchiveProcess(jobledger_cli, environ, tmp_path / "a.log", cutoff)
            assert run.wait() == 0, (tmp_path / "a.log").read_text()[-3000:]
            wait_for(lambda: len(load.quick) >= 300, "more runs after the archive", timeout=60)
        assert not load.failures
        index = check_archived(private_url, before, load)
        check_all_completed(private_url, load.quick, index)
        ready = f"{deployment.api_url}/ready"
        wait_for(lambda: httpx.get(ready, timeout=5).status_code == HTTPStatus.OK, "/ready")
        verify = jobledger_cli.run("queue", "verify", env=environ)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        with admin_client(deployment.api_url) as client:
            events = client.get(f"/api/v1/executions/{min(index)}/events").json()
        assert [e["type"] for e in events][-1] == "ExecutionCompleted"
        assert all(e["archived"] for e in events)


def check_archived(database_url: str, before: dict[str, list[Row]], load: Load) -> dict[str, Any]:
    """What was archived was closed, reads back equal to the log's rows before, and is
    no longer in the log; the open runs are all still there."""
    index = archived_index(database_url)
    assert len(index) >= 100, len(index)
    assert not set(index) & set(load.parked)
    for name, location in set(index.values()):
        for stream_id, rows in archived_rows(name, location).items():
            assert rows == before[stream_id]
            assert rows[-1][3] in CLOSING_TOPICS
    after = stored_rows(database_url)
    assert not set(index) & set(after)
    for run_id in load.parked:
        assert after[run_id][-1][3] == "jobledger:ExecutionEnqueued"
    return index


def check_all_completed(database_url: str, ids: list[str], archived: dict[str, Any]) -> None:
    """Every run ends completed: in the log, or in its archive."""
    settings = load_settings({}, database_url=database_url)
    with bootstrap(settings) as container:

        def done() -> bool:
            return all(
                i in archived
                or container.ledger.get_execution(uuid.UUID(i)).status is ExecutionStatus.COMPLETED
                for i in ids
            )

        wait_for(done, "every run completed", timeout=60)
