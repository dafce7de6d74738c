"""Built-in handlers for trying jobledger out and for testing it."""

import logging
import os
from datetime import UTC, datetime
from typing import Any

from jobledger.runtime.handlers.base import (
    Discard,
    HandlerCancelledError,
    HandlerContext,
    HandlerError,
    PermanentError,
    Snooze,
)

DEFAULT_DELAY_SECONDS = 1.0
MAX_LOG_TIMES = 10_000  # test.log's lines a run: past an attempt's bound, not forever


async def echo(ctx: HandlerContext) -> dict[str, Any]:
    """Returns its payload, and the occurrence it ran for: the smallest useful job. A
    run that waited for others (a workflow step, a dependent job) also returns what
    they returned, under ``upstream``."""
    occurrence = ctx.scheduled_for.isoformat() if ctx.scheduled_for else None
    result: dict[str, Any] = {"echo": ctx.payload, "scheduled_for": occurrence}
    if ctx.upstream_results:
        result["upstream"] = ctx.upstream_results
    return result


async def delay(ctx: HandlerContext) -> dict[str, Any]:
    """Sleeps ``payload["seconds"]`` (default 1), stopping early if cancelled."""
    seconds = float(ctx.payload.get("seconds", DEFAULT_DELAY_SECONDS))
    finished = await ctx.sleep(seconds)
    if not finished:
        raise HandlerCancelledError("cancelled while sleeping")
    return {"slept": seconds}


async def progress(ctx: HandlerContext) -> dict[str, Any]:
    """Works through ``payload["steps"]`` steps (default 4) over ``payload["seconds"]``
    (default 2), reporting its progress after each: for trying progress views."""
    steps = max(int(ctx.payload.get("steps", 4)), 1)
    pause = float(ctx.payload.get("seconds", 2.0)) / steps
    for step in range(1, steps + 1):
        if not await ctx.sleep(pause):
            raise HandlerCancelledError("cancelled between steps")
        message = str(ctx.payload.get("message", f"step {step} of {steps}"))
        await ctx.progress(100 * step / steps, message, {"step": step})
    return {"steps": steps}


async def log_message(ctx: HandlerContext) -> dict[str, Any]:
    """Writes ``payload["message"]`` to the run's log ``payload["times"]`` times
    (default 1, at most ``MAX_LOG_TIMES``), ``payload["seconds"]`` apart (default 0):
    through ``ctx.log``, and with ``payload["logging"]`` through the standard
    ``logging`` too; for trying run logs."""
    message = str(ctx.payload.get("message", ""))
    times = min(max(int(ctx.payload.get("times", 1)), 1), MAX_LOG_TIMES)
    pause = float(ctx.payload.get("seconds", 0.0))
    for line in range(1, times + 1):
        ctx.log.info("handler.log", message=message, line=line)
        if ctx.payload.get("logging"):
            logging.getLogger("jobledger.test").warning("%s, line %d", message, line)
        if pause and not await ctx.sleep(pause):
            raise HandlerCancelledError("cancelled between lines")
    return {"logged": message, "times": times}


async def fail(ctx: HandlerContext) -> dict[str, Any]:
    """Always fails, with ``payload["error"]``: for trying retries and the DLQ."""
    raise HandlerError(str(ctx.payload.get("error", "test.fail always fails")))


async def decide(ctx: HandlerContext) -> dict[str, Any]:
    """Decides its run as ``payload["decide"]`` says, with ``payload["reason"]``:
    ``snooze`` for ``seconds`` (default 1) while the ISO time ``until`` is ahead (always
    without one), ``discard``, or ``fail_permanently``; otherwise it completes."""
    payload = ctx.payload
    reason = str(payload.get("reason", "test.decide"))
    match payload.get("decide"):
        case "snooze" if _ahead(payload.get("until")):
            raise Snooze(float(payload.get("seconds", 1)), reason)
        case "discard":
            raise Discard(reason)
        case "fail_permanently":
            raise PermanentError(reason)
    return {"attempt": ctx.attempt}


def _ahead(until: object) -> bool:
    return until is None or datetime.fromisoformat(str(until)) > datetime.now(tz=UTC)


async def crash(ctx: HandlerContext) -> dict[str, Any]:
    """Kills the worker process outright, as a poison job would."""
    ctx.log.warning("handler.crash")
    os._exit(int(ctx.payload.get("exit_code", 70)))


BUILTIN = {
    "test.echo": echo,
    "test.delay": delay,
    "test.progress": progress,
    "test.log": log_message,
    "test.fail": fail,
    "test.decide": decide,
    "test.crash": crash,
}
