"""The handlers of the fault runs, registered through JOBLEDGER_HANDLERS.

Each invocation appends to the effects ledger, a file per worker process in the folder
that ``CHAOS_EFFECTS_DIR`` names: a line as it starts and one as it ends, saying
whether its side effect was made. Each line is written and fsynced before the handler
goes on, so a worker killed with -9 never loses a side effect that its execution's
log could count; at worst the last line of a file is cut short.

``chaos.effect`` waits (``seconds``, or until ``until`` seconds after the occurrence
it runs for), stopping early when cancelled, then makes its side effect; with
``progress_every`` it reports its progress that often while it waits, each report a
new message (so each is an event of the log).
``chaos.failing`` waits the same way and then fails: it never makes one.
"""

import asyncio
import json
import os
import socket
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from jobledger.runtime.handlers.base import HandlerCancelledError, HandlerContext, HandlerError

EFFECTS_DIR = "CHAOS_EFFECTS_DIR"


def worker_id() -> str:
    """This process's worker id, as `jobledger worker` names itself in the log."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _append(record: dict[str, Any]) -> None:
    path = os.path.join(os.environ[EFFECTS_DIR], f"{os.getpid()}.jsonl")  # noqa: PTH118 (os.open below)
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _seconds(ctx: HandlerContext) -> float:
    until = ctx.payload.get("until")
    if until is not None and ctx.scheduled_for is not None:
        left = ctx.scheduled_for.timestamp() + float(until) - datetime.now(UTC).timestamp()
        return max(left, 0.0)
    return float(ctx.payload.get("seconds", 0.2))


async def _wait(ctx: HandlerContext, seconds: float) -> bool:
    """Sleep ``seconds``, reporting progress every ``progress_every`` seconds if asked;
    False if cancelled."""
    every = float(ctx.payload.get("progress_every", 0)) or seconds
    waited, step = 0.0, 0
    while waited < seconds:
        pause = min(every, seconds - waited)
        if not await ctx.sleep(pause):
            return False
        waited, step = waited + pause, step + 1
        if waited < seconds:
            await ctx.progress(100 * waited / seconds, f"step {step}", {"waited": waited})
    return True


async def _invoke(ctx: HandlerContext, *, succeed: bool) -> dict[str, Any]:
    invocation = {
        "invocation": uuid.uuid4().hex,
        "execution_id": str(ctx.execution_id),
        "attempt": ctx.attempt,
        "worker": worker_id(),
    }
    await asyncio.to_thread(_append, {**invocation, "step": "start", "at": time.time()})
    durable = False
    try:
        if not await _wait(ctx, _seconds(ctx)):
            raise HandlerCancelledError("cancelled while waiting")
        if not succeed:
            raise HandlerError("chaos.failing fails every attempt")
        durable = True
    finally:
        step = {"step": "end", "at": time.time(), "durable": durable}
        await asyncio.to_thread(_append, {**invocation, **step})
    return {"invocation": invocation["invocation"]}


async def effect(ctx: HandlerContext) -> dict[str, Any]:
    return await _invoke(ctx, succeed=True)


async def failing(ctx: HandlerContext) -> dict[str, Any]:
    return await _invoke(ctx, succeed=False)


SETTING = "chaos.effect=tests.chaos.handlers:effect,chaos.failing=tests.chaos.handlers:failing"
