"""``system.archive``: move the history of executions closed before the retention from
the log to archive files (ADR 45), as `jobledger archive` does.

The use case lives above the runtime (``jobledger.services.archives``); the process
that builds its use cases hands it to the container, and this handler finds it there
when it runs.
"""

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from jobledger.runtime.handlers.base import (
    Handler,
    HandlerContext,
    HandlerError,
    PayloadRefusedError,
)

NAME = "system.archive"


class ArchiveRun(Protocol):
    def __call__(self, *, at: datetime, before: datetime | None) -> dict[str, Any]: ...


def make_archive_handler(archive_run: Callable[[], ArchiveRun | None]) -> Handler:
    async def archive(ctx: HandlerContext) -> dict[str, Any]:
        """Archives the history of executions closed before the retention
        (JOBLEDGER_RETENTION_DAYS, per queue JOBLEDGER_RETENTION_QUEUES), or before
        ``payload["before"]`` (an ISO time) where that is earlier, to
        JOBLEDGER_ARCHIVE_DIR. It never goes past the retention."""
        run = archive_run()
        if run is None:
            raise HandlerError(f"{NAME}: this worker process has no archive use case wired")
        before = _before(ctx.payload)
        # A blocking run of database and file work: off the event loop.
        summary = await asyncio.to_thread(run, at=datetime.now(tz=UTC), before=before)
        ctx.log.info("handler.archive", **summary)
        return summary

    return archive


def _before(payload: dict[str, Any]) -> datetime | None:
    if "force" in payload or "reason" in payload:
        # A run's payload says nothing of who asked: only an admin at the CLI may.
        raise PayloadRefusedError(
            f"{NAME}: a run never archives past the retention; to archive younger runs, an"
            " admin runs `jobledger archive --before TIME --force --reason TEXT`"
        )
    text = payload.get("before")
    if text is None:
        return None
    try:
        before = datetime.fromisoformat(str(text))
    except ValueError:
        raise HandlerError(f"{NAME}: before must be an ISO time, e.g. 2026-11-01T00:00Z") from None
    if before.tzinfo is None:
        raise HandlerError(f"{NAME}: before needs a time zone, e.g. 2026-11-01T00:00Z")
    return before
