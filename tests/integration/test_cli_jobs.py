"""`jobledger job ...` and `jobledger run` as real processes against a real API (with a
worker): each action in table and JSON output, the events recording the token's user,
and refusals that write nothing."""

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.integration.api.conftest import serve_api, worker_for

from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from subprocess import CompletedProcess

    from tests.conftest import JobledgerCli, LiveServer
    from tests.integration.api.conftest import Api


@pytest.fixture(scope="module")
def served(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    with (
        serve_api(module_postgres_url, redis_server, live_server) as api,
        worker_for(api),
    ):
        yield api


class Cli:
    """`jobledger` with the API's URL and a token of ``role`` in its environment."""

    def __init__(self, api: "Api", runner: "JobledgerCli", role: Role = Role.OPERATOR) -> None:
        self.api = api
        self.runner = runner
        self.env = {"JOBLEDGER_URL": api.url, "JOBLEDGER_TOKEN": api.tokens[role]}

    def __call__(self, *args: str) -> "CompletedProcess[str]":
        return self.runner.run(*args, env=self.env)

    def ok(self, *args: str) -> str:
        done = self(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--output", "json"))

    def refused(self, *args: str) -> str:
        """The one line a refused command prints; it exits 2, without a traceback."""
        done = self(*args)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        [line] = done.stderr.strip().splitlines()[-1:]
        assert done.stdout == ""
        return line

    def rows(self, search: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.json("job", "list", "--search", search)
        return rows


@pytest.fixture
def cli(served: "Api", jobledger_cli: "JobledgerCli") -> Cli:
    return Cli(served, jobledger_cli)


def _name(prefix: str) -> str:
    return f"{prefix} {uuid.uuid4().hex[:8]}"


def test_create_from_flags_show_and_list_in_both_outputs(cli: Cli) -> None:
    """If a job is created from flags, then create, show and list print it as a table
    and as JSON, the JSON in the shape the API's create takes, and its event records
    the token's user."""
    name = _name("nightly")
    flags = ("--name", name, "--handler", "test.echo", "--payload", '{"report": "sales"}')
    when = ("--cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--timeout", "90")
    created = cli.json("job", "create", *flags, *when)
    definition = created["definition"]
    assert definition["schedule"] == {
        "kind": "cron",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "jitter_seconds": 0,
        "start_at": None,
        "end_at": None,
        "exclude_dates": [],
        "calendars": [],
    }
    assert (definition["timeout_seconds"], definition["payload"]) == (90.0, {"report": "sales"})
    job_id = created["id"]
    assert cli.json("job", "show", job_id) == created
    table = cli.ok("job", "show", job_id)
    assert "schedule:  cron 30 2 * * * Europe/Berlin" in table
    assert "timeout:   90 s" in table
    cli.api.wait_for(lambda: len(cli.rows(name)) == 1)
    [row] = cli.rows(name)
    assert row["definition"] == definition
    listed = cli.ok("job", "list", "--search", name).splitlines()
    assert listed[0].split() == [
        "ID",
        "NAME",
        "STATUS",
        "SCHEDULE",
        "HANDLER",
        "QUEUE",
        "NEXT",
        "FIRE",
    ]
    assert job_id in listed[1]
    assert "cron 30 2 * * * Europe/Berlin" in listed[1]
    events = cli.api.client(Role.VIEWER).get(f"/api/v1/jobs/{job_id}/events").json()
    assert events[0]["data"]["by"] == "operator"


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_create_from_a_file_and_flags_over_it(cli: Cli, tmp_path: Path, suffix: str) -> None:
    """If a job is created from a TOML or JSON file with a flag beside it, then the job
    has the file's fields and the flag's value over the file's."""
    name = _name("from file")
    path = tmp_path / f"job{suffix}"
    if suffix == ".toml":
        path.write_text(
            f'name = "{name}"\nhandler = "test.echo"\npriority = 3\n'
            '[schedule]\nkind = "interval"\nevery_seconds = 2700\noffset_seconds = 300\n'
        )
    else:
        body = {
            "name": name,
            "handler": "test.echo",
            "priority": 3,
            "schedule": {"kind": "interval", "every_seconds": 2700, "offset_seconds": 300},
        }
        path.write_text(json.dumps(body))
    created = cli.json("job", "create", "--file", str(path), "--priority", "7")
    definition = created["definition"]
    assert (definition["name"], definition["priority"]) == (name, 7)
    schedule = definition["schedule"]
    assert (schedule["every_seconds"], schedule["offset_seconds"]) == (2700, 300)
    assert "every 2700s+300s UTC" in cli.ok("job", "show", created["id"])


def test_update_trigger_pause_resume_delete(cli: Cli) -> None:
    """If a job is updated, triggered, paused, resumed and deleted, then each action
    answers the job (or the run) in table and JSON, and the job ends deleted."""
    name = _name("lifecycle")
    job_id = cli.json("job", "create", "--name", name, "--handler", "test.echo", "--manual")["id"]
    changed = cli.json("job", "update", job_id, "--every", "3600", "--queue", "reports")
    assert changed["version"] == 2
    assert changed["definition"]["queue"] == "reports"
    assert changed["definition"]["schedule"]["every_seconds"] == 3600
    assert "every 3600s UTC" in cli.ok("job", "update", job_id, "--priority", "8")

    run = cli.json("job", "trigger", job_id)
    assert run["status"] == "pending"
    assert uuid.UUID(run["id"])
    assert cli.ok("job", "trigger", job_id).startswith(f"triggered {job_id}: run ")

    assert cli.json("job", "pause", job_id, "--reason", "maintenance")["status"] == "paused"
    assert "status:    active" in cli.ok("job", "resume", job_id)
    assert cli.json("job", "pause", job_id)["status"] == "paused"
    assert cli.json("job", "resume", job_id)["status"] == "active"
    assert cli.json("job", "delete", job_id)["status"] == "deleted"
    assert "status:    deleted" in cli.ok("job", "show", job_id)


def test_max_retries_keeps_the_rest_of_the_retry_policy(cli: Cli, tmp_path: Path) -> None:
    """If --max-retries comes beside a file's retry policy, or alone in an update, then
    only the count changes: the back-off stays as the file or the job had it."""
    path = tmp_path / "job.json"
    retry = {"max_retries": 1, "initial_backoff_seconds": 5.0, "max_backoff_seconds": 60.0}
    body = {"name": _name("retrying"), "handler": "test.echo", "retry": retry}
    path.write_text(json.dumps(body))
    created = cli.json("job", "create", "--file", str(path), "--max-retries", "2")
    expected = retry | {"max_retries": 2, "jitter": True}
    assert created["definition"]["retry"] == expected
    changed = cli.json("job", "update", created["id"], "--max-retries", "6")
    assert changed["definition"]["retry"] == expected | {"max_retries": 6}


def test_run_waits_for_the_result(cli: Cli) -> None:
    """If a handler is run with --wait, then the command prints the run's result once
    the worker completed it; without --wait it prints the pending run."""
    waited = cli.json("run", "test.echo", "--payload", '{"n": 1}', "--wait", "--wait-timeout", "30")
    assert (waited["status"], waited["result"]["echo"]) == ("completed", {"n": 1})
    table = cli.ok("run", "test.echo", "--payload", '{"n": 2}', "--wait", "--wait-timeout", "30")
    assert table.splitlines()[1] == 'result: {"echo": {"n": 2}, "scheduled_for": null}'
    pending = cli.json("run", "test.echo", "--queue", "default")
    assert pending["status"] == "pending"
    assert cli.ok("run", "test.echo").startswith("run ")


def test_bad_input_is_one_line_naming_the_flag_and_writes_nothing(cli: Cli) -> None:
    """If a command has a bad flag, file or value, or the API refuses it, then it exits
    2 with one line naming the flag and the fix, and no job is created."""
    name = _name("refused")
    base = ("job", "create", "--name", name, "--handler", "test.echo")
    assert "--payload: not JSON" in cli.refused(*base, "--payload", "{bad")
    assert "give a JSON object" in cli.refused(*base, "--payload", "[1]")
    assert "give one schedule" in cli.refused(*base, "--cron", "* * * * *", "--every", "60")
    assert "--timezone: goes with --cron or --every" in cli.refused(*base, "--timezone", "UTC")
    assert "--handler is required" in cli.refused("job", "create", "--name", name)
    assert "refused (--cron)" in cli.refused(*base, "--cron", "61 * * * *")
    assert "--at:" in cli.refused(*base, "--at", "2027-01-01T09:00")
    assert "refused (--priority)" in cli.refused(*base, "--priority", "12")
    assert "nothing to change" in cli.refused("job", "update", str(uuid.uuid4()))
    assert "refused: " in cli.refused("job", "show", str(uuid.uuid4()))
    viewer = Cli(cli.api, cli.runner, Role.VIEWER)
    assert "refused: " in viewer.refused(*base, "--manual")
    assert "no finite number" in cli.refused("run", "test.echo", "--payload", '{"x": 1e400}')
    assert "--payload.x: nan is no finite" in cli.refused(*base, "--payload", '{"x": NaN}')
    assert "refused (payload.big)" in cli.refused(
        *base, "--payload", '{"big": 1208925819614629174706176}'
    )
    assert cli.rows(name) == []


def test_an_api_that_does_not_answer_is_one_line_saying_where(
    jobledger_cli: "JobledgerCli",
) -> None:
    """If no API answers at the URL, then the command exits 2 with one line naming the
    URL and how to start or name an API, without a traceback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        unused_port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{unused_port}"
    done = jobledger_cli.run("job", "list", env={"JOBLEDGER_URL": url})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "cannot reach the API" in line
    assert str(unused_port) in line


def test_help_lists_the_commands_before_the_settings(jobledger_cli: "JobledgerCli") -> None:
    """If `jobledger --help` is asked for, then the commands come before the settings'
    own section; `jobledger help settings` prints the settings alone."""
    text = jobledger_cli.run("--help").stdout
    assert text.index("commands:") < text.index("  job ") < text.index("settings:")
    assert text.index("settings:") < text.index("--database-url VALUE")
    assert "--database-url" not in text.split("settings:")[0]
    only = jobledger_cli.run("help", "settings").stdout
    assert "--database-url VALUE" in only
    assert "commands:" not in only


OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _blocks(section: str) -> dict[str, str]:
    """The fenced blocks of one section of docs/operations.md, by language."""
    text = OPERATIONS.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"```(\w+)\n(.*?)```", text, flags=re.DOTALL))


def test_the_operations_guides_commands_run_as_written(
    cli: Cli, tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If the commands of the operations guide's section on jobs and runs are run as
    written, with its job.toml beside them, then every one of them succeeds."""
    blocks = _blocks("Jobs and runs from the command line")
    (tmp_path / "job.toml").write_text(blocks["toml"])
    bin_dir = str(Path(sys.executable).parent)
    env = jobledger_cli.environment() | cli.env
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(  # noqa: S603 (the doc's own commands, run as a reader would)
        ["bash", "-e", "-c", blocks["sh"]],  # noqa: S607 (bash from PATH, as a reader's)
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert '"echo": {"to": "ops"}' in done.stdout
