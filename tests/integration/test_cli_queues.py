"""`jobledger queue pause|resume|drain` as real processes on the embedded store."""

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import actor

from jobledger.bootstrap import bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.queue import Queue, queue_id
from jobledger.infra.settings import load_settings
from jobledger.services.executions import Executions

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

    from jobledger.infra.settings import Settings


def test_pause_drain_and_resume_from_the_command_line(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If an operator pauses a queue, drains it with a dry run first and resumes it from
    the command line, then each step is recorded with the --by name and the reason, a
    drain refuses while the checkpoint is behind the log (naming the projector), the dry
    run lists the runs and the drain cancels exactly those."""
    base = ("--data-dir", str(tmp_path))
    assert jobledger_cli.run(*base, "migrate").returncode == 0
    paused = jobledger_cli.run(
        *base, "queue", "pause", "emails", "--reason", "outage", "--by", "ops"
    )
    assert paused.returncode == 0, paused.stderr
    assert "queue emails is now paused" in paused.stdout
    again = jobledger_cli.run(*base, "queue", "pause", "emails", "--reason", "outage")
    assert "queue emails was already paused" in again.stdout
    drain = ("queue", "drain", "emails", "--reason", "stale batch", "--by", "ops")
    settings = load_settings({}, data_dir=str(tmp_path))
    with bootstrap(settings) as container:
        spec = ExecutionSpec(handler="test.echo", queue="emails")
        executions = Executions(container.ledger)
        at = datetime.now(UTC)
        runs = [executions.run(spec, key=uuid.uuid4().hex, at=at, by=actor()).id for _ in "ab"]
        behind = jobledger_cli.run(*base, *drain, "--dry-run")
        assert behind.returncode != 0
        assert "checkpoint is" in behind.stderr
        assert "projector" in behind.stderr
        # What the projector of a running deployment does: fold the log into the checkpoint.
        projector = container.projector()
        try:
            while projector.checkpoint.step():
                pass
        finally:
            projector.close()
        dry = jobledger_cli.run(*base, *drain, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        listed = sorted(str(i) for i in runs)
        assert dry.stdout.split() == [
            *listed,
            *["would", "cancel", "2", "pending", "run(s)", "of", "queue", "emails"],
        ]
        done = jobledger_cli.run(*base, *drain)
        assert done.returncode == 0, done.stderr
        assert f"  {listed[0]}" in done.stdout
        assert "cancelled 2 pending run(s) of queue emails" in done.stdout
        statuses = {container.ledger.get_execution(i).status for i in runs}
        assert statuses == {ExecutionStatus.CANCELLED}
    resumed = jobledger_cli.run(*base, "queue", "resume", "emails", "--by", "ops")
    assert "queue emails is now running" in resumed.stdout
    missing = jobledger_cli.run(*base, "queue", "pause", "emails")
    assert missing.returncode != 0
    assert "--reason" in missing.stderr
    with bootstrap(settings) as container:
        history = list(container.ledger.history(queue_id("emails")))
    kinds = [type(e) for e in history]
    assert kinds == [Queue.Registered, Queue.Paused, Queue.Drained, Queue.Resumed]
    assert (history[1].by, history[1].reason) == ("ops", "outage")
    assert (history[2].by, history[2].reason, len(history[2].cancelled)) == (
        "ops",
        "stale batch",
        2,
    )
    # What the command line writes says it came from there, the cancels of its drain too.
    assert {e.via for e in history[1:]} == {"cli"}
    cancels = [cancel for i in runs for cancel in _cancels(settings, i)]
    assert {(e.by, e.via) for e in cancels} == {("ops", "cli")}


def _cancels(settings: "Settings", execution_id: uuid.UUID) -> list[Execution.Cancelled]:
    with bootstrap(settings) as container:
        events = container.ledger.history(execution_id)
        return [e for e in events if isinstance(e, Execution.Cancelled)]
