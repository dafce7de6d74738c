"""The ``shell.command`` handler: runs an allowlisted argv template, never a shell.

Jobs pick a command by name and fill its ``{placeholders}``; each argv element is
formatted on its own, so an argument can never become two arguments or a shell
expression, and a value can never become an option: an argument that a value starts
is refused when it would start with ``-``, unless the template marks that placeholder
``{name:option}``. The command runs in its own session, so a timeout or a cancellation kills
everything it started, and anything it leaves running when it exits is killed too.
"""

import asyncio
import os
import signal
import string
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from jobledger.infra.errors import SettingsError
from jobledger.runtime.handlers.base import (
    Handler,
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
)

NAME = "shell.command"
COMMANDS_SETTING = "JOBLEDGER_SHELL_COMMANDS"
ERROR_EXCERPT_CHARS = 200
# The one format spec a placeholder may carry: its value may start with "-".
OPTION_SPEC = "option"
POLL_SECONDS = 0.05
# Once the group is dead the pipes close at once; this only bounds a process that
# escaped the group (setsid) while still holding them.
DRAIN_SECONDS = 1.0
READ_CHUNK = 64 * 1024
# The worker's own environment holds database and broker credentials: pass on only
# what programs need to run.
INHERITED_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


@dataclass(frozen=True)
class ShellSettings:
    commands: Mapping[str, tuple[str, ...]]  # name -> argv template; empty disables
    timeout: float = 60.0
    max_output_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        commands = {name: tuple(argv) for name, argv in self.commands.items()}
        for name, argv in commands.items():
            _check_template(name, argv)
        # A read-only copy: the caller's mapping may change, the settings may not.
        object.__setattr__(self, "commands", MappingProxyType(commands))


def _check_template(name: str, argv: tuple[str, ...]) -> None:
    if not argv or not all(isinstance(element, str) for element in argv):
        raise SettingsError(f"{COMMANDS_SETTING}: {name!r} must be a non-empty list of strings")
    if _placeholders(name, argv[0]):
        # A payload that picks the program would make the allowlist meaningless.
        raise SettingsError(
            f"{COMMANDS_SETTING}: {name!r} has a placeholder in its program {argv[0]!r}; "
            "only the arguments may have placeholders"
        )
    for element in argv[1:]:
        _placeholders(name, element)


def _placeholders(name: str, element: str) -> list[str]:
    """The ``{names}`` in one argv element; only plain names are allowed."""
    try:
        parsed = list(string.Formatter().parse(element))
    except ValueError as error:
        raise SettingsError(
            f"{COMMANDS_SETTING}: {name!r} has a malformed template {element!r} ({error}); "
            "write {name} for a placeholder and {{ or }} for a literal brace"
        ) from None
    found: list[str] = []
    for _, field_name, format_spec, conversion in parsed:
        if field_name is None:
            continue
        if not field_name.isidentifier() or format_spec not in {"", OPTION_SPEC} or conversion:
            raise SettingsError(
                f"{COMMANDS_SETTING}: {name!r} has an unsupported placeholder in {element!r}; "
                "use a plain {name}, or {name:option} for a value that may start with -"
            )
        found.append(field_name)
    return found


def _fill(name: str, element: str, values: dict[str, str]) -> str:
    """One argv element with its placeholders filled. A value that would start the
    argument with ``-`` is refused unless its placeholder is ``{x:option}``: a payload
    must not turn a file name into ``--version`` or ``--output=/etc/passwd``. Text
    before the placeholder (``--out={path}``) keeps it from being an option."""
    text = ""
    for literal, field_name, format_spec, _ in string.Formatter().parse(element):
        text += literal
        if field_name is None:
            continue
        if field_name not in values:
            raise PayloadRefusedError(
                f"{NAME}: {name!r} needs args.{field_name}; add it to the payload"
            )
        value = values[field_name]
        if not text and value.startswith("-") and format_spec != OPTION_SPEC:
            raise PayloadRefusedError(
                f"{NAME}: args.{field_name} starts with '-', so {name!r} would read it as an "
                "option; pass a value that does not start with '-' (a file name as "
                f"./name), or mark the placeholder {{{field_name}:{OPTION_SPEC}}} in "
                f"{COMMANDS_SETTING} if options are meant"
            )
        text += value
    return text


def render(settings: ShellSettings, name: object, args: object) -> list[str]:
    """The argv for command ``name`` with ``args`` filled in, or a PayloadRefusedError
    (the execution's own error: the breaker does not count it)."""
    if not settings.commands:
        raise PayloadRefusedError(
            f"{NAME}: the handler is disabled (no commands are allowed); "
            f"list commands in {COMMANDS_SETTING} to enable it"
        )
    if not isinstance(name, str) or name not in settings.commands:
        raise PayloadRefusedError(
            f"{NAME}: {name!r} is not an allowed command; "
            f"allowed: {', '.join(sorted(settings.commands))}; add it to {COMMANDS_SETTING}"
        )
    values = _values(args)
    program, *arguments = settings.commands[name]
    return [program, *(_fill(name, element, values) for element in arguments)]


def _values(args: object) -> dict[str, str]:
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise PayloadRefusedError(f"{NAME}: payload.args must be an object of placeholder values")
    values: dict[str, str] = {}
    for key, value in args.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise PayloadRefusedError(f"{NAME}: args.{key} must be a string or a number")
        values[str(key)] = str(value)
        if "\0" in values[str(key)]:
            raise PayloadRefusedError(f"{NAME}: args.{key} contains a NUL character")
    return values


@dataclass
class _Capture:
    """Keeps the first ``limit`` bytes of a stream and drains the rest."""

    limit: int
    data: bytearray = field(default_factory=bytearray)
    truncated: bool = False

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        # Reading on past the cap keeps the child from blocking on a full pipe.
        while stream is not None and (chunk := await stream.read(READ_CHUNK)):
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode(errors="replace")


def make_shell_handler(settings: ShellSettings) -> Handler:
    """The ``shell.command`` handler, bound to ``settings``."""

    async def shell_command(ctx: HandlerContext) -> dict[str, Any]:
        """Runs a named command of JOBLEDGER_SHELL_COMMANDS (payload: command, args)."""
        name = ctx.payload.get("command")
        argv = render(settings, name, ctx.payload.get("args"))
        started = time.monotonic()
        process = await _start(str(name), argv)
        out, err = _Capture(settings.max_output_bytes), _Capture(settings.max_output_bytes)
        readers = asyncio.gather(out.drain(process.stdout), err.drain(process.stderr))
        try:
            stopped = await _wait(ctx, process, settings.timeout)
        finally:
            _kill_group(process.pid)
            await _settle(process, readers)
            await _reaped(process)
        elapsed_ms = round((time.monotonic() - started) * 1000)
        if stopped:
            ctx.log.warning(
                "handler.shell.killed",
                command=name,
                reason=stopped,
                elapsed_ms=elapsed_ms,
            )
            raise HandlerError(f"{NAME}: {name!r} {stopped}; its process group was killed")
        return _finish(
            ctx, str(name), returncode=process.returncode, out=out, err=err, elapsed_ms=elapsed_ms
        )

    return shell_command


async def _wait(ctx: HandlerContext, process: asyncio.subprocess.Process, time_limit: float) -> str:
    """Waits for the command's exit; returns why it was stopped, or "" if it exited."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + time_limit
    # returncode, not wait(): wait() also waits for the pipes, which a left-behind
    # grandchild may hold open.
    while process.returncode is None:
        if ctx.cancelled.is_set():
            return "was cancelled"
        remaining = deadline - loop.time()
        if remaining <= 0:
            return f"timed out after {time_limit:g}s"
        await asyncio.sleep(min(remaining, POLL_SECONDS))
    return ""


async def _start(name: str, argv: list[str]) -> asyncio.subprocess.Process:
    environment = {key: os.environ[key] for key in INHERITED_ENVIRONMENT if key in os.environ}
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
            start_new_session=True,  # its own process group, so it can be killed as a whole
        )
    except OSError as error:
        raise HandlerError(
            f"{NAME}: cannot start {name!r} ({argv[0]}: {error.strerror or error}); "
            f"check its program in {COMMANDS_SETTING}"
        ) from None


def _kill_group(pgid: int) -> None:
    # The group is gone already when the command exited and left nothing behind.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _settle(process: asyncio.subprocess.Process, readers: "asyncio.Future[Any]") -> None:
    _, pending = await asyncio.wait({readers}, timeout=DRAIN_SECONDS)
    if pending:
        # A process that left the group (setsid) still holds the pipes: stop reading and
        # close them, or the transport would stay open for good. asyncio has no public way.
        readers.cancel()
        transport = getattr(process, "_transport", None)
        if transport is not None:
            transport.close()
    with suppress(asyncio.CancelledError):
        await readers


async def _reaped(process: asyncio.subprocess.Process) -> None:
    # Not wait(): see _wait. The leader was sent SIGKILL, so this is short.
    while process.returncode is None:  # noqa: ASYNC110 (wait() is the only event, see above)
        await asyncio.sleep(POLL_SECONDS)


def _finish(
    ctx: HandlerContext,
    name: str,
    *,
    returncode: int | None,
    out: _Capture,
    err: _Capture,
    elapsed_ms: int,
) -> dict[str, Any]:
    truncated = out.truncated or err.truncated
    ctx.log.info(
        "handler.shell.finished",
        command=name,
        exit_code=returncode,
        elapsed_ms=elapsed_ms,
        truncated=truncated,
    )
    if returncode != 0:
        excerpt = err.text().strip()[-ERROR_EXCERPT_CHARS:]
        raise HandlerError(f"{NAME}: {name!r} {_exit_text(returncode)}; stderr: {excerpt!r}")
    return {"exit_code": 0, "stdout": out.text(), "stderr": err.text(), "truncated": truncated}


def _exit_text(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        with suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"
