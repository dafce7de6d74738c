"""`jobledger job backfill` as a real process on the embedded store."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import actor

from jobledger.adapters.store import open_ledger
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import FireTrigger, Job
from jobledger.domain.schedules import CronSchedule
from jobledger.infra.settings import load_settings
from jobledger.services.jobs import Jobs

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli


def test_backfill_dry_run_then_run_by_key_then_nothing(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If a job made with a key is backfilled over 12 past hours, then --dry-run lists
    the 12 occurrences and fires nothing, the run fires 12, and a second run finds them
    all fired; a window in the future is refused in one line."""
    assert jobledger_cli.run("--data-dir", str(tmp_path), "migrate").returncode == 0
    ledger = open_ledger(load_settings({}, data_dir=str(tmp_path)))
    end = datetime.now(tz=UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=11)
    try:
        definition = JobDefinition(
            name="hourly",
            spec=ExecutionSpec(handler="test.echo"),
            schedule=CronSchedule("0 * * * *"),
        )
        # Created now: its next occurrence is the scheduler's, the past ones a backfill's.
        job = Jobs(ledger).schedule(
            definition, at=datetime.now(tz=UTC), by=actor(), key="hourly-report"
        )
    finally:
        ledger.close()
    window = ("--from", start.isoformat(), "--to", end.isoformat())
    base = ("--data-dir", str(tmp_path), "job", "backfill", "hourly-report", *window)
    dry = jobledger_cli.run(*base, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "12 occurrences in the window: 0 already fired, 0 excluded, 12 to fire" in dry.stdout
    assert f"  {start.isoformat()}" in dry.stdout
    assert "dry run: nothing fired" in dry.stdout
    run = jobledger_cli.run(*base, "--reason", "gap", "--by", "ops")
    assert run.returncode == 0, run.stderr
    assert "fired 12, buffered 0, skipped 0" in run.stdout
    again = jobledger_cli.run(*base)
    assert "12 already fired" in again.stdout
    assert "fired 0," in again.stdout
    future = jobledger_cli.run(
        "--data-dir",
        str(tmp_path),
        "job",
        "backfill",
        str(job.id),
        "--from",
        start.isoformat(),
        "--to",
        (end + timedelta(days=2)).isoformat(),
    )
    assert future.returncode == 2
    assert "end:" in future.stderr
    assert len(future.stderr.strip().splitlines()) == 1
    ledger = open_ledger(load_settings({}, data_dir=str(tmp_path)))
    try:
        fires = [e for e in ledger.history(job.id) if isinstance(e, Job.Fired)]
        backfilled = [e for e in ledger.history(job.id) if isinstance(e, Job.Backfilled)]
    finally:
        ledger.close()
    assert len(fires) == 12
    assert {e.trigger for e in fires} == {FireTrigger.BACKFILL}
    assert next((e.by, e.reason) for e in backfilled) == ("ops", "gap")
