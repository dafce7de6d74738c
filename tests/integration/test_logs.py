"""Production logs: one JSON object per line, each naming its event and the ids it
concerns, with secrets redacted; run as real processes on PostgreSQL and Redis."""

import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import IO, TYPE_CHECKING, Any

from tests.conftest import actor

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import ExecutionStatus
from jobledger.domain.policies import RetryPolicy
from jobledger.services.jobs import Jobs

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli
    from tests.integration.conftest import Harness

DB_PASSWORD = "hunter2-db-pw"
BEARER = "sekrit-bearer-1234"
LEAKED_URL = f"postgresql://app:{DB_PASSWORD}@db.internal/app"


def _parse(text: str) -> list[dict[str, Any]]:
    """Every line as JSON: a line that is not JSON fails the test here."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _with_password(url: str) -> str:
    # Trust authentication ignores it, so the worker connects as before.
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{DB_PASSWORD}@{host}"


def _one(lines: list[dict[str, Any]], event: str, **ids: object) -> dict[str, Any]:
    found = [
        line
        for line in lines
        if line["event"] == event and all(line.get(k) == v for k, v in ids.items())
    ]
    assert len(found) == 1, f"{event} {ids}: {found}"
    return found[0]


def _run_mixed_executions(harness: "Harness") -> dict[str, Any]:
    """A job whose runs fail twice into the DLQ, a logging run, and a webhook refused
    for its private address: every kind of worker line."""
    retry = RetryPolicy(max_retries=1, initial_backoff=timedelta(milliseconds=200), jitter=False)
    spec = ExecutionSpec(handler="test.fail", payload={"error": f"lost {LEAKED_URL}"}, retry=retry)
    ledger, now = harness.container.ledger, datetime.now(tz=UTC)
    job = Jobs(ledger).schedule(JobDefinition(name="failing", spec=spec), at=now, by=actor("test"))
    failing = Jobs(ledger).trigger(job.id, key="k1", at=now, by=actor("test"))
    logging_run = harness.run("test.log", message=f"calling with Authorization: Bearer {BEARER}")
    webhook = harness.run(
        "http.webhook",
        retries=0,
        url="http://127.0.0.1:9/hook",
        headers={"Authorization": f"Bearer {BEARER}"},
    )
    harness.wait_for_all([logging_run], ExecutionStatus.COMPLETED, timeout=20)
    harness.wait_for_all([failing, webhook], ExecutionStatus.DEAD_LETTERED, timeout=20)
    return {"job": job, "failing": failing, "logging": logging_run, "webhook": webhook}


def test_worker_lines_are_json_with_ids_and_no_secrets(harness: "Harness") -> None:
    """If a worker runs in production mode with the default log format, then every line
    is a JSON object with event, level and timestamp; every line about an attempt names
    the execution, its job, the attempt and the worker; and neither the database
    password nor a webhook's Authorization header nor a password inside an error text
    appears anywhere."""
    url = _with_password(harness.container.settings.database_url)
    worker = harness.start_worker(log_format="auto", log_level="debug", database_url=url)
    runs = _run_mixed_executions(harness)
    text = worker.stop()
    lines = _parse(text)
    assert all({"event", "level", "timestamp"} <= line.keys() for line in lines)
    worker_id = _one(lines, "worker.started")["worker_id"]
    attempt_ids = {"worker_id": worker_id}
    failing, job_id = str(runs["failing"].id), str(runs["job"].id)
    first = _one(lines, "worker.execution_failed", execution_id=failing, attempt=1)
    assert first | attempt_ids == first
    assert first["job_id"] == job_id
    assert first["level"] == "warning"
    last = _one(lines, "worker.execution_dead_lettered", execution_id=failing, attempt=2)
    assert (last["job_id"], last["level"]) == (job_id, "error")
    assert "postgresql://app:***@db.internal/app" in last["error"]
    logged = _one(lines, "handler.log", execution_id=str(runs["logging"].id), attempt=1)
    assert logged | attempt_ids | {"job_id": None} == logged
    assert logged["message"] == "calling with Authorization: Bearer ***"
    _one(lines, "worker.execution_completed", execution_id=str(runs["logging"].id))
    _one(lines, "handler.webhook.refused", execution_id=str(runs["webhook"].id), attempt=1)
    for secret in (DB_PASSWORD, BEARER):
        assert secret not in text


def _wait_for_line(log: IO[bytes], marker: bytes, process: "subprocess.Popen[bytes]") -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        log.seek(0)
        if marker in log.read():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {marker!r} in the log within 20 s")


def test_the_scheduler_names_its_leader_epoch(
    postgres_url: str, redis_server: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If a scheduler wins the election and is stopped, then its log says so in JSON
    lines that carry the leader epoch: elected, and stepped down as a routine release
    (info, not a warning)."""
    environ = jobledger_cli.environment(
        database_url=postgres_url, redis_url=redis_server, redis_prefix=uuid.uuid4().hex[:8]
    )
    with tempfile.TemporaryFile() as log:
        scheduler = subprocess.Popen(  # noqa: S603 (our own entry point)
            [*jobledger_cli.command, "scheduler"], env=environ, stderr=log
        )
        try:
            _wait_for_line(log, b"leader.elected", scheduler)
            scheduler.send_signal(signal.SIGTERM)
            assert scheduler.wait(20) == 0
        finally:
            scheduler.kill()
            scheduler.wait()
        log.seek(0)
        lines = _parse(log.read().decode())
    elected = _one(lines, "leader.elected")
    stepped_down = _one(lines, "leader.stepped_down")
    assert elected["leader_epoch"] == stepped_down["leader_epoch"] >= 1
    assert elected["scheduler_id"] == stepped_down["scheduler_id"]
    assert (stepped_down["reason"], stepped_down["level"]) == ("released", "info")


def test_dev_mode_logs_are_readable_lines(jobledger_cli: "JobledgerCli") -> None:
    """If the mode is dev and the format is left at auto, then log lines are readable
    text, not JSON; in production mode the same line is JSON."""
    code = (
        "import structlog, sys;"
        "from jobledger.infra.settings import load_settings;"
        "from jobledger.infra.logging import configure_logging;"
        "configure_logging(load_settings({}, mode=sys.argv[1]));"
        "structlog.get_logger().info('probe.logged', job_id='j1')"
    )
    outputs = {}
    for mode in ("dev", "production"):
        result = subprocess.run(  # noqa: S603 (this interpreter, a fixed program)
            [sys.executable, "-c", code, mode],
            env=jobledger_cli.environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        outputs[mode] = result.stderr.strip()
    assert "probe.logged" in outputs["dev"]
    assert "job_id=j1" in outputs["dev"]
    assert not outputs["dev"].startswith("{")
    assert json.loads(outputs["production"])["job_id"] == "j1"
