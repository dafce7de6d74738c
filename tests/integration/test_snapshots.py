"""Job snapshots, on SQLite and PostgreSQL: a cold load replays only the events after
the newest snapshot, and gets exactly the job that replaying every event gives."""

import subprocess
import sys
import typing
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import actor

from jobledger.adapters.store import open_ledger
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.policies import MisfirePolicy
from jobledger.domain.schedules import CronSchedule, MissedFires
from jobledger.infra.errors import StoreNotMigratedError
from jobledger.infra.settings import Settings, load_settings
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.services.jobs import Jobs

AT = datetime(2026, 3, 1, tzinfo=UTC)
INTERVAL = 5


def definition(cron: str = "*/5 * * * *") -> JobDefinition:
    return JobDefinition(
        name="snapshotted",
        spec=ExecutionSpec(handler="test.echo", payload={"n": 1}),
        schedule=CronSchedule(cron, "Europe/Berlin"),
    )


@pytest.fixture
def small_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Ledger, "snapshotting_intervals", {Job: INTERVAL})


@pytest.fixture
def cold(store_settings: Settings) -> Settings:
    """Settings for ledgers that keep no aggregate in memory: every load is cold."""
    return load_settings(
        {},
        test_handlers="true",
        database_url=store_settings.database_url,
        data_dir=store_settings.data_dir,
        aggregate_cache_size="0",
    )


def replayed(ledger: Ledger, job_id: uuid.UUID, version: int | None = None) -> Job:
    """The job from every one of its events, no snapshot involved."""
    job: Any = None
    for domain_event in ledger.events.get(job_id, lte=version):
        job = typing.cast("Job.Event", domain_event).mutate(job)
    assert isinstance(job, Job)
    return job


def attributes(job: Job) -> dict[str, Any]:
    return {k: v for k, v in vars(job).items() if k != "_pending_events"}


def fire_through_writer(ledger: Ledger, job: Job, count: int) -> None:
    with GroupCommitWriter(ledger, max_batch=10, max_delay=0.001) as writer:
        for _ in range(count):
            assert job.next_fire_at is not None
            at = job.next_fire_at
            writer.submit(job, job.fire(scheduled_for=at, leader_epoch=1, at=at)).result()


@pytest.mark.usefixtures("small_interval")
def test_fires_saved_by_the_writer_are_snapshotted_and_load_back_equal(cold: Settings) -> None:
    """If a job fires 23 times through the group-commit writer, then there is a snapshot
    at every fifth version, and a cold load, at the head and at each version, equals
    the job replayed from all its events, attribute for attribute."""
    ledger = open_ledger(cold)
    try:
        job = Jobs(ledger).schedule(definition(), at=AT, by=actor("test"))
        fire_through_writer(ledger, job, 23)
        assert ledger.snapshots is not None
        versions = [s.originator_version for s in ledger.snapshots.get(job.id)]
        assert versions == [5, 10, 15, 20]
        for version in (None, 1, 4, 5, 6, 19, 20, 24):
            loaded = ledger.get_job(job.id, version=version)
            assert attributes(loaded) == attributes(replayed(ledger, job.id, version))
        assert ledger.get_job(job.id).fired_count == 23
    finally:
        ledger.close()


@pytest.mark.usefixtures("small_interval")
def test_jobs_loaded_together_equal_each_loaded_alone(cold: Settings) -> None:
    """If jobs with and without snapshots (and events after them) are loaded together,
    then each equals its own cold load, attribute for attribute, and an id of no job
    (unknown, or an execution's) is left out."""
    ledger = open_ledger(cold)
    try:
        jobs = [Jobs(ledger).schedule(definition(), at=AT, by=actor("test")) for _ in range(4)]
        for job, fires in zip(jobs, (0, 4, 5, 13), strict=True):
            fire_through_writer(ledger, job, fires)  # versions 1, 5, 6 and 14
        execution = jobs[0].trigger(trigger_key="k", at=AT, by="op")
        ledger.save_all(jobs[0], execution)
        loaded = ledger.get_jobs([*(j.id for j in jobs), uuid.uuid4(), execution.id])
        assert sorted(loaded) == sorted(j.id for j in jobs)
        for job in jobs:
            assert attributes(loaded[job.id]) == attributes(ledger.get_job(job.id))
        assert [loaded[j.id].version for j in jobs] == [2, 5, 6, 14]
        assert ledger.get_jobs([]) == {}
    finally:
        ledger.close()


COMMANDS = st.lists(
    st.sampled_from(["fire", "miss", "pause_resume", "update", "trigger"]),
    min_size=1,
    max_size=30,
)


def apply(job: Job, command: str, at: datetime) -> list[Any]:
    """One command on ``job``; returns any execution it made, to be saved with it."""
    if command == "fire" and job.next_fire_at is not None:
        return [job.fire(scheduled_for=job.next_fire_at, leader_epoch=2, at=at)]
    if command == "miss" and job.next_fire_at is not None:
        first = job.next_fire_at
        job.record_missed_fires(MissedFires(first, first, 1), policy=MisfirePolicy.SKIP)
    elif command == "pause_resume":
        job.pause(by="op", reason="maintenance")
        job.resume(at=at, by="op")
    elif command == "update":
        job.update(definition("0 * * * *"), at=at, by="op")
    elif command == "trigger":
        return [job.trigger(trigger_key=uuid.uuid4().hex, at=at, by="op")]
    return []


@pytest.mark.usefixtures("small_interval")
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commands=COMMANDS)
def test_any_history_loads_the_same_from_snapshots(cold: Settings, commands: list[str]) -> None:
    """If a job goes through any mix of fires, missed fires, pauses, updates and
    triggers, saved one command at a time, then at every version the snapshot-backed
    cold load equals the full replay."""
    ledger = open_ledger(cold)
    try:
        job = Jobs(ledger).schedule(definition(), at=AT, by=actor("test"))
        at = AT
        for command in commands:
            at += timedelta(minutes=7)
            ledger.save_all(job, *apply(job, command, at))
        for version in range(1, job.version + 1):
            loaded = ledger.get_job(job.id, version=version)
            assert attributes(loaded) == attributes(replayed(ledger, job.id, version))
    finally:
        ledger.close()


def test_a_store_without_the_snapshot_table_asks_for_migrate(store_settings: Settings) -> None:
    """If the store was migrated by a release without snapshots, then opening it says to
    run `jobledger migrate` instead of failing at the first load."""
    if store_settings.uses_postgres:
        with psycopg.connect(store_settings.database_url, autocommit=True) as conn:
            conn.execute("DROP TABLE jobledger_snapshots")
    else:
        import sqlite3  # noqa: PLC0415 (only this branch needs it)

        with sqlite3.connect(store_settings.sqlite_path) as conn:
            conn.execute("DROP TABLE stored_snapshots")
    with pytest.raises(StoreNotMigratedError, match="jobledger migrate"):
        open_ledger(store_settings)


@pytest.mark.usefixtures("small_interval")
def test_a_process_that_never_took_a_snapshot_loads_a_snapshotted_job(
    cold: Settings, tmp_path: Any
) -> None:
    """If one process snapshots a job and another, fresh one loads it (an API or a
    scheduler started after), then the fresh one decodes the snapshot: its topic is
    known from the start, not only once a process has taken a snapshot itself."""
    with open_ledger(cold) as ledger:
        job = Job.schedule(definition(), at=AT, by="ops")
        ledger.save(job)
        fire_through_writer(ledger, job, 2 * INTERVAL)
        job_id = job.id
    script = tmp_path / "load.py"
    script.write_text(
        "import sys, uuid\n"
        "from jobledger.infra.settings import load_settings\n"
        "from jobledger.adapters.store import open_ledger\n"
        "settings = load_settings({}, database_url=sys.argv[1], data_dir=sys.argv[2],"
        " aggregate_cache_size='0')\n"
        "with open_ledger(settings) as ledger:\n"
        "    print(ledger.get_job(uuid.UUID(sys.argv[3])).version)\n"
    )
    done = subprocess.run(  # noqa: S603 (this test's own script)
        [
            sys.executable,
            str(script),
            cold.database_url or "",
            str(cold.data_dir or ""),
            str(job_id),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 2 * INTERVAL + 1
