"""The `jobledger` command: runs as a real process, errors in one clear line."""

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli


def test_migrate_then_status_on_the_embedded_store(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If a fresh data folder is migrated, then status reports an empty SQLite log."""
    migrated = jobledger_cli.run("--data-dir", str(tmp_path), "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "applied 0001_store_identity.sql" in migrated.stdout
    status = jobledger_cli.run("--data-dir", str(tmp_path), "status")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["persistence"] == "eventsourcing.sqlite"
    assert (tmp_path / "events.sqlite3").exists()


def test_status_before_migrate_says_what_to_do(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If the store was never migrated, then status says to run migrate, in one line."""
    result = jobledger_cli.run("--data-dir", str(tmp_path), "status")
    assert result.returncode == 2
    assert "jobledger migrate" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"JOBLEDGER_DATABASE_URL": "mysql://db/x"}, "JOBLEDGER_DATABASE_URL"),
        ({"JOBLEDGER_DATABASE_URL": "postgresql://u@127.0.0.1:1/x"}, "JOBLEDGER_DATABASE_URL"),
        ({"JOBLEDGER_WRITER_MAX_BATCH": "lots"}, "JOBLEDGER_WRITER_MAX_BATCH"),
    ],
)
def test_bad_settings_fail_in_one_line(
    env: dict[str, str], named: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If a setting is bad, then the command exits 2 with one line naming it."""
    result = jobledger_cli.run("migrate", env=env)
    assert result.returncode == 2
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_config_masks_secrets(jobledger_cli: "JobledgerCli") -> None:
    """If the database URL has a password, then config prints it masked."""
    result = jobledger_cli.run(
        "config", env={"JOBLEDGER_DATABASE_URL": "postgresql://u:hunter2@h/db"}
    )
    assert result.returncode == 0
    assert "hunter2" not in result.stdout
    assert json.loads(result.stdout)["database_url"] == "postgresql://u:***@h/db"


def test_config_masks_credentials_in_shell_templates(jobledger_cli: "JobledgerCli") -> None:
    """If a shell command template carries an Authorization header, then `jobledger
    config` prints the header's name and ``***``, not its value."""
    templates = {"hook": ["curl", "-H", "Authorization: token hunter2-token", "{url}"]}
    result = jobledger_cli.run("config", env={"JOBLEDGER_SHELL_COMMANDS": json.dumps(templates)})
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout
    shown = json.loads(json.loads(result.stdout)["shell_commands"])
    assert shown == {"hook": ["curl", "-H", "Authorization: ***", "{url}"]}


def test_a_bad_flag_fails_in_one_line_naming_the_flag(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If a flag's value is out of range, then the command exits 2 with one line naming
    the flag, the allowed range and the value, and creates no store."""
    result = jobledger_cli.run("--data-dir", str(tmp_path), "--worker-slots", "0", "migrate")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "jobledger: --worker-slots: use 1 to 1000 concurrent executions (default 4); got '0'"
    ]
    assert not (tmp_path / "events.sqlite3").exists()


def test_config_prints_list_settings_as_json_arrays(jobledger_cli: "JobledgerCli") -> None:
    """If list settings are given comma-separated, then config prints each as a JSON
    array of its entries."""
    result = jobledger_cli.run(
        "--trusted-proxies",
        "10.0.0.5, 192.168.0.0/24",
        "config",
        env={"JOBLEDGER_WORKER_QUEUES": "high,default"},
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["worker_queues"] == ["high", "default"]
    assert shown["trusted_proxies"] == ["10.0.0.5", "192.168.0.0/24"]
    assert shown["handlers"] == []


def test_config_masks_passwords_in_url_queries(jobledger_cli: "JobledgerCli") -> None:
    """If a password is given as ?password= in the database or the Redis URL, then
    config prints it masked and keeps the rest of the URL."""
    result = jobledger_cli.run(
        "config",
        env={
            "JOBLEDGER_DATABASE_URL": "postgresql://u@h/db?password=hunter2&sslmode=require",
            "JOBLEDGER_REDIS_URL": "redis://cache:6379/0?password=hunter3",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "hunter" not in result.stdout
    shown = json.loads(result.stdout)
    assert shown["database_url"] == "postgresql://u@h/db?password=***&sslmode=require"
    assert shown["redis_url"] == "redis://cache:6379/0?password=***"


def test_schedule_preview_applies_the_dst_policy(jobledger_cli: "JobledgerCli") -> None:
    """If a 02:30 New York cron is previewed across spring-forward, then that day's fire
    is shown at the jump, 03:00 EDT."""
    result = jobledger_cli.run(
        "schedule",
        "preview",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--count",
        "3",
        "--from",
        "2026-03-07T00:00-05:00",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        "2026-03-07 02:30 EST (-0500)  2026-03-07 07:30 UTC",
        "2026-03-08 03:00 EDT (-0400)  2026-03-08 07:00 UTC",
        "2026-03-09 02:30 EDT (-0400)  2026-03-09 06:30 UTC",
    ]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["0 0 * * * *"], "schedule.expression"),
        (["0 0 * * *", "--tz", "Mars/Olympus"], "schedule.timezone"),
        (["0 0 * * *", "--from", "yesterday"], "--from"),
        (["0 0 * * *", "--from", "9999-12-31T23:59:59-14:00"], "--from"),
        (["0 0 * * *", "--from", "0001-01-01T00:00:00+14:00"], "--from"),
        (["0 0 * * *", "--tz", "localtime"], "schedule.timezone"),
        (["*/0 * * * *"], "schedule.expression"),
        (["0 */1000000 * * *"], "schedule.expression"),
    ],
)
def test_schedule_preview_rejects_bad_input_in_one_line(
    args: list[str], named: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If the cron, zone or start is bad, then preview exits 2 with one line naming it."""
    result = jobledger_cli.run("schedule", "preview", *args)
    assert result.returncode == 2
    assert named in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dlq_commands_refuse_a_reason_past_the_limit_in_one_line(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If `dlq requeue` is given a reason longer than the log's reasons may be, then it
    exits 2 with one line naming --reason's field instead of counting refusals."""
    assert jobledger_cli.run("--data-dir", str(tmp_path), "migrate").returncode == 0
    result = jobledger_cli.run(
        "--data-dir", str(tmp_path), "dlq", "requeue", "--by", "ops", "--reason", "r" * 2001
    )
    assert result.returncode == 2, result.stdout
    assert "reason: is 2001 characters long" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_bad_shell_allowlist_stops_the_worker_in_one_line(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If JOBLEDGER_SHELL_COMMANDS is not JSON, then the worker refuses to start with one
    line naming the setting."""
    assert jobledger_cli.run("--data-dir", str(tmp_path), "migrate").returncode == 0
    result = jobledger_cli.run(
        "--data-dir", str(tmp_path), "worker", env={"JOBLEDGER_SHELL_COMMANDS": "greet=echo"}
    )
    assert result.returncode == 2
    assert "JOBLEDGER_SHELL_COMMANDS" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("action", "route"),
    [("verify", "GET /api/v1/admin/queue/verify"), ("rebuild", "POST /api/v1/admin/queue/rebuild")],
)
def test_queue_commands_on_an_embedded_data_folder_point_to_the_dev_process(
    tmp_path: Path, jobledger_cli: "JobledgerCli", action: str, route: str
) -> None:
    """If `queue verify` or `queue rebuild` runs against an embedded data folder, then it
    says in one line that the queue lives in the `jobledger dev` process, names the admin
    route to use instead, and exits 2 without reporting a lost queue or a difference."""
    assert jobledger_cli.run("--data-dir", str(tmp_path), "migrate").returncode == 0
    result = jobledger_cli.run("--data-dir", str(tmp_path), "queue", action)
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert "jobledger dev" in line
    assert route in line
    assert "JOBLEDGER_REDIS_URL" in line
