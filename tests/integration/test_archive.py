"""Retention and archives (ADR 45), on SQLite and PostgreSQL: closed executions'
history moves to verified archive files and leaves the log, their read-model rows and
snapshots; what is open stays; followers, rebuilds and verify stay right; audits read
the history back from the archives."""

import asyncio
import getpass
import json
import os
import stat
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from tests.conftest import actor
from tests.integration.raw_events import write_undecodable

from jobledger.adapters.sql.archives import SqlArchiveBooks
from jobledger.adapters.store import archive_lock
from jobledger.bootstrap import Container, bootstrap, build_services
from jobledger.domain.clock import utc_now
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.errors import InvalidTransitionError, NotFoundError
from jobledger.domain.execution import Execution, ExecutionStatus, occurrence_execution_id
from jobledger.domain.policies import MisfirePolicy, RetryPolicy
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.settings import Settings, load_settings
from jobledger.persistence.archive_files import events_digest, read_events, verified
from jobledger.projections.log.archive_store import ArchiveStore, ClosedStream
from jobledger.runtime.handlers.base import (
    Handler,
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
)
from jobledger.runtime.projector import Projector
from jobledger.services.application import Services
from jobledger.services.archives import ArchiveNotVerifiedError, ArchiveUnreadableError
from jobledger.services.errors import AlreadyRunningError
from jobledger.services.history import EventOut

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

# These tests archive runs made seconds earlier: an admin's forced archive, with why.
TIDY = "a test archives the runs it just made"
SPEC = ExecutionSpec(
    handler="test.echo", payload={"n": 1}, retry=RetryPolicy(max_retries=0, jitter=False)
)


@pytest.fixture
def settings(store_settings: Settings, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """The store's settings; a test parametrized indirectly adds its own."""
    return load_settings(
        {},
        test_handlers="true",
        database_url=store_settings.database_url,
        data_dir=store_settings.data_dir,
        archive_dir=str(tmp_path / "archives"),
        archive_batch="4",
        **getattr(request, "param", {}),
    )


@pytest.fixture
def container(settings: Settings) -> Iterator[Container]:
    with bootstrap(settings) as built:
        yield built


@pytest.fixture
def projector(container: Container) -> Iterator[Projector]:
    projector = container.projector()
    yield projector
    projector.close()


def catch_up(projector: Projector) -> None:
    """Every follower applies the whole log."""
    read_models = projector.read_models
    assert read_models is not None
    for step in (projector.queue.step, projector.checkpoint.step, read_models.step):
        while step():
            pass


class Runs:
    """Executions in every state, made through the use cases and the aggregate."""

    def __init__(self, services: Services, container: Container) -> None:
        self.services, self.ledger = services, container.ledger
        self.closed: list[uuid.UUID] = []
        self.open: list[uuid.UUID] = []

    def run(self) -> Execution:
        key = uuid.uuid4().hex
        return self.services.executions.run(SPEC, key=key, at=utc_now(), by=actor())

    def leased(self) -> tuple[Execution, uuid.UUID]:
        execution, lease = self.run(), uuid.uuid4()
        expires = utc_now() + timedelta(seconds=30)
        execution.lease(worker_id="w", lease_id=lease, lease_expires_at=expires)
        return execution, lease

    def make(self, *, completed: int, cancelled: int, pending: int, leased: int, dead: int) -> None:
        for _ in range(completed):
            execution, lease = self.leased()
            execution.complete(lease_id=lease, duration=timedelta(seconds=1), result={"ok": 1})
            self._save(execution, closed=True)
        for _ in range(cancelled):
            execution = self.run()
            execution.cancel(by="test", reason="not needed")
            self._save(execution, closed=True)
        for _ in range(leased):
            self._save(self.leased()[0], closed=False)
        for _ in range(dead):
            execution, lease = self.leased()
            execution.fail(lease_id=lease, error="boom", at=utc_now())
            assert execution.status is ExecutionStatus.DEAD_LETTERED
            self._save(execution, closed=False)
        self.open += [self.run().id for _ in range(pending)]

    def _save(self, execution: Execution, *, closed: bool) -> None:
        self.ledger.save_all(execution)
        (self.closed if closed else self.open).append(execution.id)


@pytest.fixture
def services(container: Container) -> Services:
    return build_services(container)


@pytest.fixture
def runs(services: Services, container: Container) -> Runs:
    return Runs(services, container)


def stored(container: Container, execution_id: uuid.UUID) -> list[tuple[Any, ...]]:
    positions = container.ledger.positions(execution_id)
    return [
        (positions[e.originator_version], e.originator_version, e.topic, e.state)
        for e in container.ledger.recorder.select_events(execution_id)
    ]


def read_model_ids(container: Container) -> list[str]:
    with container.database.transaction(snapshot=True) as cursor:
        cursor.execute("SELECT id FROM jobledger_rm_executions ORDER BY id")
        return [str(row[0]) for row in cursor.fetchmany(10_000)]


def cli_env(settings: Settings) -> dict[str, str]:
    """The CLI's environment for this test's store and archive folder."""
    return {
        "JOBLEDGER_DATABASE_URL": settings.database_url,
        "JOBLEDGER_DATA_DIR": settings.data_dir,
        "JOBLEDGER_ARCHIVE_DIR": str(settings.archive_path),
    }


def shown(events: list[EventOut]) -> list[tuple[Any, ...]]:
    return [(e.type, e.version, e.position, e.timestamp, e.data) for e in events]


def test_closed_history_moves_to_verified_archives(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If closed executions are archived, then their events leave the log for archives
    that read back equal to them, their read-model rows go too, what is open stays, and
    their history answers from the archive, marked archived."""
    runs.make(completed=6, cancelled=3, pending=2, leased=2, dead=1)
    catch_up(projector)
    before = {i: stored(container, i) for i in runs.closed}
    histories = {i: services.executions.history(i) for i in runs.closed}

    report = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )

    assert report.executions == len(runs.closed) == 9
    assert len(report.batches) == 3  # archive_batch=4
    for execution_id in runs.closed:
        with pytest.raises(NotFoundError):
            container.ledger.get_execution(execution_id)
        events = services.executions.history(execution_id)
        assert all(e.archived for e in events)
        assert shown(events) == shown(histories[execution_id])
    for execution_id in runs.open:
        assert container.ledger.get_execution(execution_id).id == execution_id
    assert read_model_ids(container) == sorted(str(i) for i in runs.open)
    folder = container.settings.archive_path
    archived = [e for b in report.batches for e in read_events(folder / f"{b.name}.jsonl.gz")]
    assert sorted((e.position, e.originator_version, e.topic, e.state) for e in archived) == sorted(
        row for rows in before.values() for row in rows
    )
    for batch in report.batches:
        manifest = verified(folder, batch.name)
        assert manifest.events_sha256 == events_digest(
            read_events(folder / f"{batch.name}.jsonl.gz")
        )


def test_a_second_run_finds_nothing_and_a_dry_run_removes_nothing(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If a dry run counts, then nothing leaves the log; if a run archived everything
    due, then a second run archives nothing and records nothing."""
    runs.make(completed=3, cancelled=0, pending=1, leased=0, dead=0)
    catch_up(projector)
    head = container.head()
    dry = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY, dry_run=True
    )
    assert (dry.executions, dry.events, dry.batches) == (3, 9, [])
    assert container.head() == head
    assert not container.settings.archive_path.exists()
    first = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    catch_up(projector)
    again = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    assert (first.executions, again.executions, again.batches) == (3, 0, [])


def test_nothing_above_the_slowest_follower_is_archived(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If the read models have not applied an execution's closing event, then it stays
    in the log; once they have, it is archived."""
    runs.make(completed=2, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    runs.make(completed=2, cancelled=0, pending=0, leased=0, dead=0)
    projector.queue.step()  # the queue and the checkpoint move on, the read models not
    projector.checkpoint.step()
    report = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    assert report.mark.follower == "read-models"
    assert report.executions == 2
    for execution_id in runs.closed[2:]:
        assert container.ledger.get_execution(execution_id).status is ExecutionStatus.COMPLETED
    catch_up(projector)
    assert (
        services.archives.archive(
            at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
        ).executions
        == 2
    )


def test_followers_rebuilds_and_verify_stay_right(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If history was archived, then the live followers go on, the queue verifies, and
    a rebuild of the read models and of the queue gives what the followers hold."""
    runs.make(completed=5, cancelled=1, pending=3, leased=1, dead=1)
    catch_up(projector)
    services.archives.archive(at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY)
    runs.make(completed=1, cancelled=0, pending=1, leased=0, dead=0)
    catch_up(projector)
    assert services.admin.verify_queue(by=actor())[0] == []
    followed = read_model_ids(container)
    container.read_models().rebuild()
    assert read_model_ids(container) == followed
    assert set(followed) == {str(i) for i in runs.open + runs.closed[6:]}
    projector.queue.rebuild(full=True)
    assert services.admin.verify_queue(by=actor())[0] == []


def test_an_interrupted_removal_leaves_the_log_and_is_redone(
    container: Container,
    services: Services,
    runs: Runs,
    projector: Projector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the removal fails after the archive was written, then the log keeps every
    event, and the next run removes the orphaned files and archives it all."""
    runs.make(completed=3, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    head = container.head()

    def fails(_self: ArchiveStore, _removal: object) -> None:
        raise OSError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(ArchiveStore, "remove", fails)
        with pytest.raises(OSError, match="killed"):
            services.archives.archive(
                at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
            )
    assert container.head() == head
    assert all(container.ledger.get_execution(i) for i in runs.closed)
    assert list(container.settings.archive_path.iterdir())  # the orphaned files
    report = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    assert (report.orphans_removed, report.executions) == (2, 3)


def test_a_changed_log_rolls_the_removal_back(
    container: Container,
    services: Services,
    runs: Runs,
    projector: Projector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the events removed are not those archived, then nothing is removed."""
    runs.make(completed=1, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    original = ArchiveStore.closed

    def tampered(self: ArchiveStore, rows: Any, mark: int) -> list[ClosedStream]:
        found = original(self, rows, mark)
        for stream in found:
            first = stream.events[0]
            stream.events[0] = msgspec.structs.replace(first, state=first.state + b" ")
        return found

    monkeypatch.setattr(ArchiveStore, "closed", tampered)
    with pytest.raises(ArchiveNotVerifiedError, match="not those archived"):
        services.archives.archive(at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY)
    assert container.ledger.get_execution(runs.closed[0]).status is ExecutionStatus.COMPLETED
    with container.database.transaction(snapshot=True) as cursor:
        assert SqlArchiveBooks().names(cursor) == set()


def test_one_run_at_a_time(services: Services, settings: Settings) -> None:
    """If another run holds the archive lock, then a second run is refused."""
    with archive_lock(settings) as locked:
        assert locked
        with pytest.raises(AlreadyRunningError):
            services.archives.archive(at=utc_now(), by=actor())


def test_the_retention_decides_without_before(
    services: Services, runs: Runs, projector: Projector
) -> None:
    """If the retention (30 days) has not passed since an execution closed, then it
    stays; once it has, it is archived."""
    runs.make(completed=2, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    report = services.archives.archive(at=utc_now(), by=actor())
    assert report.executions == 0
    later = utc_now() + timedelta(days=31)
    assert services.archives.archive(at=later, by=actor()).executions == 2


def test_the_cli_archives_and_audits_from_the_archive(
    runs: Runs,
    projector: Projector,
    jobledger_cli: "JobledgerCli",
    settings: Settings,
) -> None:
    """If `jobledger archive` ran, then `jobledger audit` answers for an archived
    execution from the log's index and from the archive folder, marked archived."""
    runs.make(completed=2, cancelled=1, pending=1, leased=0, dead=0)
    catch_up(projector)
    env = cli_env(settings)
    before = (utc_now() + timedelta(seconds=1)).isoformat()
    forced = ["--force", "--reason", TIDY]
    dry = jobledger_cli.run(
        "archive", "--before", utc_now().isoformat(), *forced, "--dry-run", env=env
    )
    assert "would archive 3 execution(s), 8 event(s)" in dry.stdout, dry.stderr
    time.sleep(1)
    done = jobledger_cli.run("archive", "--before", before, *forced, env=env)
    assert done.returncode == 0, done.stderr
    assert "archived 3 execution(s), 8 event(s)" in done.stdout
    closed = str(runs.closed[0])
    for source in (["--execution", closed], ["--archive", str(settings.archive_path)]):
        audit = jobledger_cli.run("audit", *source, env=env)
        assert audit.returncode == 0, audit.stderr
        lines = [json.loads(line) for line in audit.stdout.splitlines()]
        mine = [line for line in lines if line["aggregate_id"] == closed]
        assert [line["type"] for line in mine] == [
            "ExecutionEnqueued",
            "ExecutionLeased",
            "ExecutionCompleted",
        ]
        assert all(line["archived"] for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["archive", "--before", "yesterday"], "--before: 'yesterday' is not an ISO time"),
        (["archive", "--before", "2999-01-01T00:00Z"], "--before: give a time in the past"),
        (["archive", "--reason", "tidy"], "--reason: give it with --force"),
        (["archive", "--force", "--reason", "tidy"], "before: is not given"),
        (["archive", "--before", "2026-01-01T00:00Z", "--force"], "reason: is empty"),
        (["audit"], "audit: give --execution ID, --archive PATH, or both"),
        (["audit", "--archive", "/nonexistent/a"], "/nonexistent/a: no such file or folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    jobledger_cli: "JobledgerCli", settings: Settings, args: list[str], message: str
) -> None:
    """If the archive or audit command is given bad input, then it says what and how to
    fix it in one line, exits 2, and writes nothing."""
    env = {"JOBLEDGER_DATABASE_URL": settings.database_url, "JOBLEDGER_DATA_DIR": settings.data_dir}
    result = jobledger_cli.run(*args, env=env)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert not settings.archive_path.exists()


def test_a_damaged_archive_is_refused_by_the_audit(
    services: Services, runs: Runs, projector: Projector, settings: Settings
) -> None:
    """If an archive file was changed after it was written, then audits refuse it,
    naming the file and the fix, instead of answering from it."""
    runs.make(completed=1, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    report = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    data = settings.archive_path / f"{report.batches[0].name}.jsonl.gz"
    data.write_bytes(data.read_bytes() + b"\0")
    with pytest.raises(ArchiveUnreadableError, match="is not the manifest's"):
        services.executions.history(runs.closed[0])
    with pytest.raises(ArchiveUnreadableError, match="is not the manifest's") as refused:
        list(services.archives.audit(settings.archive_path))
    assert refused.value.fix == "restore the archive's files from a backup"


def test_a_restored_archive_is_whole_in_the_log_again(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If an archive is restored, then its events are back at their old positions, the
    history reads from the log again, a read-model rebuild lists the runs again, a
    second restore is refused, and the runs can be archived again."""
    runs.make(completed=3, cancelled=1, pending=1, leased=0, dead=0)
    catch_up(projector)
    before = {i: stored(container, i) for i in runs.closed}
    services.archives.archive(at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY)
    folder = container.settings.archive_path
    restored = services.archives.restore(folder, by=actor())
    assert sum(batch.executions for batch in restored) == 4
    for execution_id in runs.closed:
        assert stored(container, execution_id) == before[execution_id]
        assert not any(e.archived for e in services.executions.history(execution_id))
    container.read_models().rebuild()
    assert read_model_ids(container) == sorted(str(i) for i in runs.open + runs.closed)
    with pytest.raises(InvalidTransitionError, match="restored already"):
        services.archives.restore(folder, by=actor())
    catch_up(projector)
    time.sleep(1)  # another second: another archive name
    again = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    assert (again.executions, again.orphans_removed) == (4, 0)


# 0.00002 days: 1.728 s.
@pytest.mark.parametrize("settings", [{"retention_days": "0.00002"}], indirect=True)
def test_the_system_archive_handler_runs_the_use_case(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If a worker runs ``system.archive`` once the retention has passed, then the
    process's archive use case archives (a ``before`` in the year 2999 held to the
    retention) and the run's result says what; a bad ``before`` fails the run with a
    clear error and archives nothing."""
    runs.make(completed=2, cancelled=0, pending=1, leased=0, dead=0)
    catch_up(projector)
    handler = container.handlers().get("system.archive")
    assert handler is not None
    with pytest.raises(HandlerError, match="before must be an ISO time"):
        call(handler, context(before="soon"))
    time.sleep(2)
    result = call(handler, context(before="2999-01-01T00:00Z"))
    assert (result["executions"], result["events"], result["dry_run"]) == (2, 6, False)
    assert result["held_to_retention"]
    assert len(result["archives"]) == 1
    assert services.executions.history(runs.closed[0])[0].archived


def test_a_before_past_the_retention_archives_nothing_younger(
    container: Container,
    services: Services,
    runs: Runs,
    projector: Projector,
    *,
    jobledger_cli: "JobledgerCli",
    settings: Settings,
) -> None:
    """If a ``before`` later than the retention is given, to the use case, to a
    ``system.archive`` run or to `jobledger archive`, without an admin forcing it, then
    nothing closed within the retention leaves the log, the lists or the audit, and
    each says it held the cut-off to the retention."""
    runs.make(completed=3, cancelled=1, pending=1, leased=0, dead=0)
    catch_up(projector)
    head = container.head()
    far = datetime(2999, 1, 1, tzinfo=UTC)
    report = services.archives.archive(at=utc_now(), by=actor(), before=far)
    assert (report.executions, report.held) == (0, True)
    handler = container.handlers().get("system.archive")
    assert handler is not None
    result = call(handler, context(before=far.isoformat()))
    assert (result["executions"], result["held_to_retention"]) == (0, True)
    with pytest.raises(PayloadRefusedError, match="--force --reason TEXT"):
        call(handler, context(before=far.isoformat(), force=True, reason="tidy"))
    env = cli_env(settings)
    done = jobledger_cli.run("archive", "--before", utc_now().isoformat(), env=env)
    assert done.returncode == 0, done.stderr
    assert "archived 0 execution(s)" in done.stdout
    assert "held to it; to archive younger runs, add --force --reason TEXT" in done.stdout
    assert container.head() == head
    assert read_model_ids(container) == sorted(str(i) for i in runs.open + runs.closed)
    for execution_id in runs.closed:
        assert not any(e.archived for e in services.executions.history(execution_id))


def test_a_forced_archive_is_recorded_with_who_and_why(
    services: Services,
    runs: Runs,
    projector: Projector,
    jobledger_cli: "JobledgerCli",
    settings: Settings,
) -> None:
    """If an admin forces `jobledger archive` past the retention with a reason, then the
    runs are archived and the log's ``HistoryArchived``, in the audit feed, says who
    forced it and why."""
    runs.make(completed=2, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    env = cli_env(settings)
    before = (utc_now() + timedelta(seconds=1)).isoformat()
    time.sleep(1)
    reason = "erasure request 4711"
    done = jobledger_cli.run("archive", "--before", before, "--force", "--reason", reason, env=env)
    assert done.returncode == 0, done.stderr
    assert "archived 2 execution(s)" in done.stdout
    page = services.system.audit_page(
        after=0, types=frozenset({"HistoryArchived"}), since=None, until=None, limit=10
    )
    (recorded,) = page.items
    assert recorded.data is not None
    assert (recorded.data["by"], recorded.data["reason"], recorded.data["forced"]) == (
        getpass.getuser(),
        reason,
        True,
    )


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_archive_files_and_folders_are_private_whatever_the_umask(
    services: Services, runs: Runs, projector: Projector, settings: Settings, umask: int
) -> None:
    """If an archive runs under a permissive umask, then its folder is 0700 and every
    file in it 0600."""
    runs.make(completed=2, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    previous = os.umask(umask)
    try:
        report = services.archives.archive(at=utc_now() + timedelta(days=31), by=actor())
    finally:
        os.umask(previous)
    assert report.executions == 2
    folder = settings.archive_path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = list(folder.iterdir())
    assert len(files) == 2
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def test_a_handler_without_the_use_case_says_so(settings: Settings) -> None:
    """If a process never built its use cases, then ``system.archive`` fails its run
    saying so instead of doing anything."""
    with bootstrap(settings) as bare:
        handler = bare.handlers().get("system.archive")
        assert handler is not None
        with pytest.raises(HandlerError, match="no archive use case"):
            call(handler, context())


def context(**payload: object) -> HandlerContext:
    return HandlerContext(
        execution_id=uuid.uuid4(), job_id=None, attempt=1, lease_deadline=utc_now(), payload=payload
    )


def call(handler: Handler, ctx: HandlerContext) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        return await handler(ctx)

    return asyncio.run(run())


def test_a_backfill_never_fires_an_archived_occurrence_again(
    container: Container, services: Services, projector: Projector
) -> None:
    """If a job's backfilled runs were archived, then a backfill of the same window
    counts them as fired and fires none."""
    start = datetime(2026, 11, 20, tzinfo=UTC)
    hourly = JobDefinition(
        name="hourly", spec=SPEC, schedule=CronSchedule("0 * * * *"), misfire=MisfirePolicy.SKIP
    )
    job = services.jobs.schedule(hourly, at=start, by=actor())
    services.jobs.pause(job.id, by=actor())
    end, at = start + timedelta(hours=23), start + timedelta(days=2)
    first = services.jobs.backfill(job.id, start=start, end=end, at=at, by=actor())
    assert first.fired == 24
    for hour in range(24):
        run = container.ledger.get_execution(
            occurrence_execution_id(job.id, start + timedelta(hours=hour))
        )
        run.cancel(by="test", reason="not needed")
        container.ledger.save_all(run)
    catch_up(projector)
    report = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    assert report.executions == 24
    again = services.jobs.backfill(job.id, start=start, end=end, at=at, by=actor())
    assert (again.already_fired, again.fired) == (24, 0)


def test_an_undecodable_execution_stays_in_the_log(
    container: Container, services: Services, runs: Runs, projector: Projector
) -> None:
    """If an execution's first event no longer decodes, then the archive leaves its
    stream in the log and archives the others."""
    broken = write_undecodable(container.ledger, "jobledger:ExecutionEnqueued")
    runs.make(completed=2, cancelled=0, pending=0, leased=0, dead=0)
    catch_up(projector)
    report = services.archives.archive(
        at=utc_now(), by=actor(), before=utc_now(), forced_because=TIDY
    )
    assert report.executions == 2
    assert [e.originator_version for e in container.ledger.recorder.select_events(broken)] == [1]
