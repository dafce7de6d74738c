"""The shell handler running real processes: allowlist, placeholders, caps, timeouts, groups."""

import asyncio
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobledger.infra.errors import SettingsError
from jobledger.runtime.handlers.base import HandlerContext, HandlerError
from jobledger.runtime.handlers.shell import ShellSettings, make_shell_handler

# Writes the group id (the shell is the session leader) to $1, then leaves children behind.
RECORD_GROUP = 'echo $$ > "$1"; '
COMMANDS: Mapping[str, tuple[str, ...]] = {
    "greet": ("echo", "hello", "{name}"),
    "tree": ("sh", "-c", RECORD_GROUP + "sleep 30 & sleep 30", "sh", "{group_file}"),
    "orphan": ("sh", "-c", RECORD_GROUP + "sleep 30 & echo started", "sh", "{group_file}"),
    "escape": ("sh", "-c", "setsid sleep 5 & echo $!"),
    "flood": ("sh", "-c", "head -c 50000 /dev/zero | tr '\\0' a"),
    "fail": ("sh", "-c", "echo working; echo 'disk is full' >&2; exit 3"),
    "environment": ("sh", "-c", "echo ${{JOBLEDGER_TEST_SECRET:-unset}}"),
}


def _context(payload: dict[str, Any]) -> HandlerContext:
    return HandlerContext(
        execution_id=uuid.uuid4(),
        job_id=None,
        attempt=1,
        lease_deadline=datetime.now(UTC) + timedelta(minutes=1),
        payload=payload,
    )


def _run(settings: ShellSettings, ctx: HandlerContext) -> dict[str, Any]:
    handler = make_shell_handler(settings)

    async def call() -> dict[str, Any]:
        return await handler(ctx)

    return asyncio.run(call())


def _run_payload(settings: ShellSettings, **payload: Any) -> dict[str, Any]:
    return _run(settings, _context(payload))


def _group_is_gone(pgid: int, within: float = 3.0) -> bool:
    """True once no live process is left in the group (zombies awaiting a reaper count as gone)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if not _live_members(pgid):
            return True
        time.sleep(0.05)
    return False


def _live_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited while we looked
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in {"Z", "X"}:
            members.append(int(stat.parent.name))
    return members


def test_allowlisted_command_fills_placeholders_without_a_shell() -> None:
    """If an allowed command has a placeholder, then each value stays a single argument."""
    result = _run_payload(
        ShellSettings(commands=COMMANDS), command="greet", args={"name": "world; rm -rf $HOME"}
    )
    assert result == {
        "exit_code": 0,
        "stdout": "hello world; rm -rf $HOME\n",
        "stderr": "",
        "truncated": False,
    }


def test_command_off_the_allowlist_is_refused() -> None:
    """If the command is not in the allowlist, then HandlerError lists what is allowed."""
    settings = ShellSettings(commands={"greet": COMMANDS["greet"], "fail": COMMANDS["fail"]})
    with pytest.raises(HandlerError) as refused:
        _run_payload(settings, command="rm", args={})
    assert str(refused.value) == (
        "shell.command: 'rm' is not an allowed command; allowed: fail, greet; "
        "add it to JOBLEDGER_SHELL_COMMANDS"
    )


def test_handler_without_commands_is_disabled() -> None:
    """If no commands are configured, then every job is refused as disabled."""
    with pytest.raises(HandlerError, match=r"handler is disabled.*JOBLEDGER_SHELL_COMMANDS"):
        _run_payload(ShellSettings(commands={}), command="greet", args={"name": "x"})


def test_missing_placeholder_is_named() -> None:
    """If args lacks a placeholder's value, then HandlerError names the placeholder."""
    with pytest.raises(HandlerError, match=r"'greet' needs args.name"):
        _run_payload(ShellSettings(commands=COMMANDS), command="greet", args={"other": "x"})


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """If the command outlives the timeout, then it and every child it started are killed."""
    group_file = tmp_path / "group"
    settings = ShellSettings(commands=COMMANDS, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(HandlerError, match=r"'tree' timed out after 0.5s; its process group"):
        _run_payload(settings, command="tree", args={"group_file": str(group_file)})
    assert time.monotonic() - started < 5
    assert _group_is_gone(int(group_file.read_text()))


def test_children_left_behind_after_exit_are_killed(tmp_path: Path) -> None:
    """If the command exits but leaves a child running, then the result comes without waiting."""
    group_file = tmp_path / "group"
    started = time.monotonic()
    result = _run_payload(
        ShellSettings(commands=COMMANDS), command="orphan", args={"group_file": str(group_file)}
    )
    assert result["stdout"] == "started\n"
    assert time.monotonic() - started < 5
    assert _group_is_gone(int(group_file.read_text()))


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs the setsid program")
def test_child_that_escapes_the_group_does_not_hold_up_the_result() -> None:
    """If a child leaves the group but keeps the pipes open, then the result still comes."""
    started = time.monotonic()
    result = _run_payload(ShellSettings(commands=COMMANDS), command="escape")
    escaped = int(result["stdout"])
    try:
        assert time.monotonic() - started < 4
    finally:
        os.kill(escaped, signal.SIGKILL)


def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    """If the execution is cancelled while running, then the group is killed and it fails."""
    group_file = tmp_path / "group"
    ctx = _context({"command": "tree", "args": {"group_file": str(group_file)}})
    threading.Timer(0.3, ctx.cancelled.set).start()
    with pytest.raises(HandlerError, match="'tree' was cancelled; its process group was killed"):
        _run(ShellSettings(commands=COMMANDS, timeout=30), ctx)
    assert _group_is_gone(int(group_file.read_text()))


def test_output_beyond_the_cap_is_truncated_and_flagged() -> None:
    """If the command writes more than max_output_bytes, then the rest is dropped and flagged."""
    settings = ShellSettings(commands=COMMANDS, max_output_bytes=1000)
    result = _run_payload(settings, command="flood")
    assert result["stdout"] == "a" * 1000
    assert result["truncated"] is True


def test_non_zero_exit_fails_with_code_and_stderr() -> None:
    """If the command exits non-zero, then HandlerError has the exit code and stderr."""
    with pytest.raises(HandlerError) as failed:
        _run_payload(ShellSettings(commands=COMMANDS), command="fail")
    assert str(failed.value) == "shell.command: 'fail' exited with code 3; stderr: 'disk is full'"


def test_worker_environment_is_not_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the worker has secrets in its environment, then the command does not see them."""
    monkeypatch.setenv("JOBLEDGER_TEST_SECRET", "hunter2")
    result = _run_payload(ShellSettings(commands=COMMANDS), command="environment")
    assert result["stdout"] == "unset\n"


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        (("{program}", "x"), "placeholder in its program"),
        (("echo", "{name!r}"), "unsupported placeholder"),
        (("echo", "{name:>10}"), "unsupported placeholder"),
        (("echo", "{0}"), "unsupported placeholder"),
        (("echo", "{name"), "malformed template"),
        ((), "non-empty list of strings"),
    ],
)
def test_bad_templates_are_refused_at_settings_time(
    template: tuple[str, ...], problem: str
) -> None:
    """If a template is malformed or lets the payload pick the program, then settings fail."""
    with pytest.raises(SettingsError, match=problem):
        ShellSettings(commands={"bad": template})


@pytest.mark.parametrize(
    ("template", "value"),
    [
        (("ls", "{path}"), "--version"),
        (("ls", "{path}"), "-la"),
        (("ls", "{path}"), "--"),
        (("ls", "{path}.txt"), "--version"),
        (("ls", "{a}{path}"), "--version"),
        (("ls", "{path}"), -5),
    ],
)
def test_a_value_never_becomes_an_option(template: tuple[str, ...], value: object) -> None:
    """If a placeholder's value would start its argument with '-', then the attempt is
    refused before anything runs, naming the value and the template's way to allow it."""
    settings = ShellSettings(commands={"list": template})
    with pytest.raises(HandlerError, match=r"args\.path starts with '-'.*\{path:option\}"):
        _run_payload(settings, command="list", args={"path": value, "a": ""})


def test_a_value_inside_an_argument_or_marked_as_option_is_passed() -> None:
    """If the template puts text before the placeholder (--out={x}), or marks it
    {x:option}, then a value starting with '-' is passed as it is."""
    commands = {
        "inside": ("echo", "--label={name}"),
        "option": ("echo", "{flag:option}", "x"),
        "plain": ("echo", "{name}"),
    }
    settings = ShellSettings(commands=commands)
    inside = _run_payload(settings, command="inside", args={"name": "--version"})
    assert inside["stdout"] == "--label=--version\n"
    option = _run_payload(settings, command="option", args={"flag": "-n"})
    assert option["stdout"] == "x"
    assert _run_payload(settings, command="plain", args={"name": "a-b"})["stdout"] == "a-b\n"
    with pytest.raises(HandlerError, match="NUL"):
        _run_payload(settings, command="plain", args={"name": "a\0b"})
