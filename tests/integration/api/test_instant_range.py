"""One range of instants on every way a time comes in: one ad-hoc run, a batch, an
outbox row, the client's own check, ``jobledger apply`` and the CLI each refuse a time
outside it, naming the field, and write nothing (PostgreSQL, a live API)."""

import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import psycopg
import pytest

from jobledger import apply_cli
from jobledger.bootstrap import build_services
from jobledger.cli import build_parser
from jobledger.client import Client, ValidationError, enqueue_in_transaction
from jobledger.domain.instants import EARLIEST, LATEST
from jobledger.domain.roles import Role
from jobledger.schemas.outbox import OUTBOX_INSERT

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli
    from tests.integration.api.conftest import Api

PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))
# Each a valid ISO time whose instant lies outside the range: past its end with the
# largest negative offset, before its start with the largest positive one, and a hair
# beyond each end.
OUTSIDE = (
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    (LATEST + timedelta(milliseconds=1)).astimezone(MINUS_14).isoformat(),
    (EARLIEST - timedelta(milliseconds=1)).astimezone(PLUS_14).isoformat(),
)
# The ends themselves, written with the same offsets, are taken.
INSIDE = (LATEST.astimezone(MINUS_14).isoformat(), EARLIEST.astimezone(PLUS_14).isoformat())


def _error(response: Any) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    error: dict[str, Any] = response.json()["error"]
    assert "outside the supported range" in error["message"], error
    assert error["fix"]
    return error


def test_one_run_outside_the_range_is_refused(module_api: "Api") -> None:
    """If an ad-hoc run's run_at lies outside the range at either end (offsets -14:00
    and +14:00), then POST /api/v1/executions answers 422 naming run_at and the log is
    as it was; the range's own ends are taken."""
    client = module_api.client(Role.OPERATOR)
    head = module_api.container.head()
    for moment in OUTSIDE:
        refused = client.post("/api/v1/executions", json={"handler": "test.echo", "run_at": moment})
        assert _error(refused)["field"] == "run_at"
    assert module_api.container.head() == head
    for moment in INSIDE:
        taken = client.post("/api/v1/executions", json={"handler": "test.echo", "run_at": moment})
        assert taken.status_code == 202, taken.text


def test_a_unique_run_outside_the_range_is_refused(module_api: "Api") -> None:
    """If a unique run's run_at lies outside the range, then it is refused as a plain
    run is, and nothing is written."""
    client = module_api.client(Role.OPERATOR)
    head = module_api.container.head()
    body = {"handler": "test.echo", "run_at": OUTSIDE[0], "unique": {"key": "u"}}
    assert _error(client.post("/api/v1/executions", json=body))["field"] == "run_at"
    assert module_api.container.head() == head


def test_a_batch_with_one_run_outside_the_range_writes_nothing(module_api: "Api") -> None:
    """If one run of a batch has a run_at outside the range, then the batch answers
    422 naming ``runs[i].run_at`` and none of its runs is written."""
    client = module_api.client(Role.OPERATOR)
    head = module_api.container.head()
    for moment in OUTSIDE:
        runs = [{"handler": "test.echo"}, {"handler": "test.echo", "run_at": moment}]
        refused = client.post("/api/v1/executions:batch", json={"runs": runs})
        assert _error(refused)["field"] == "runs[1].run_at"
    assert module_api.container.head() == head


def test_an_outbox_row_outside_the_range_is_refused(
    module_api: "Api", module_postgres_url: str
) -> None:
    """If an outbox row (written by other means than the client) has a run_at outside
    the range, then the relay keeps the row refused with an error naming run_at, and
    no run is written."""
    outbox = build_services(module_api.container).outbox
    assert outbox is not None
    keys = [f"far-{uuid.uuid4().hex[:8]}" for _ in OUTSIDE]
    with psycopg.connect(module_postgres_url) as conn, conn.transaction():
        conn.execute("DELETE FROM jobledger_outbox")
        for key, moment in zip(keys, OUTSIDE, strict=True):
            run = msgspec.json.encode({"handler": "test.echo", "run_at": moment}).decode()
            conn.execute(OUTBOX_INSERT, (key, run))
    head = module_api.container.head()
    report = outbox.relay(at=datetime.now(tz=UTC))
    assert (report.enqueued, report.refused) == (0, len(OUTSIDE))
    assert module_api.container.head() == head
    with psycopg.connect(module_postgres_url) as conn:
        refused = conn.execute("SELECT refused FROM jobledger_outbox").fetchall()
        conn.execute("DELETE FROM jobledger_outbox")
    assert len(refused) == len(OUTSIDE)
    assert all(str(error).startswith("run_at: ") for (error,) in refused)


def test_the_client_refuses_a_time_outside_the_range_before_sending(
    module_api: "Api", module_postgres_url: str
) -> None:
    """If the client is given a run_at outside the range (enqueue, enqueue_many or
    enqueue_in_transaction), then it raises the ValidationError the server would
    answer, naming run_at, and nothing is sent or written into the outbox."""
    head = module_api.container.head()
    with Client(module_api.url, module_api.tokens[Role.OPERATOR]) as client:
        for moment in (datetime.fromisoformat(text) for text in OUTSIDE):
            with pytest.raises(ValidationError) as refused:
                client.enqueue("test.echo", run_at=moment)
            assert refused.value.field == "run_at"
            assert refused.value.fix
            with pytest.raises(ValidationError):
                client.enqueue_many("test.echo", [{}], run_at=moment)
            with psycopg.connect(module_postgres_url) as conn, pytest.raises(ValidationError):
                enqueue_in_transaction(conn, "test.echo", run_at=moment)
    with psycopg.connect(module_postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM jobledger_outbox").fetchone() == (0,)
    assert module_api.container.head() == head


def test_apply_refuses_a_one_shot_outside_the_range(
    module_api: "Api", tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """If a jobs file declares a one-shot schedule outside the range, then apply
    refuses the set naming the job's schedule.run_at, and writes nothing."""
    path = tmp_path / "jobs.toml"
    head = module_api.container.head()
    for moment in OUTSIDE[:2]:
        path.write_text(
            '[[jobs]]\nkey = "far.once"\nname = "far"\nhandler = "test.echo"\n'
            f'schedule = {{kind = "once", run_at = {moment}}}\n'
        )
        token = module_api.tokens[Role.OPERATOR]
        parsed = build_parser().parse_args(
            ["apply", "--file", str(path), "--url", module_api.url, "--token", token]
        )
        assert apply_cli.run(parsed, lambda _line: None) == 2
        assert "jobs[far.once].schedule.run_at" in capsys.readouterr().err
    assert module_api.container.head() == head


def test_the_cli_refuses_a_time_outside_the_range(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If a CLI time flag (backfill's --from and --to, archive's --before) lies outside
    the range, then the command exits with one line naming the flag and the range."""
    base = ("--data-dir", str(tmp_path))
    assert jobledger_cli.run(*base, "migrate").returncode == 0
    early, late = OUTSIDE[1], OUTSIDE[0]
    backfill = (*base, "job", "backfill", "no-such-job", "--from", early, "--to", late)
    refused = jobledger_cli.run(*backfill)
    assert refused.returncode != 0
    assert "--from" in refused.stderr
    assert "outside the supported range" in refused.stderr
    assert "Traceback" not in refused.stderr
