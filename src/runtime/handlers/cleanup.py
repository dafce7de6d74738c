"""``system.cleanup``: forget what only served finished executions. The log is never
touched: it is the history."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from jobledger.projections.queue.backend import QueueBackend
from jobledger.projections.read_models.tables import ReadModelTables
from jobledger.runtime.handlers.base import Handler, HandlerContext, HandlerError

NAME = "system.cleanup"
DEFAULT_RETENTION_HOURS = 24.0


def make_cleanup_handler(
    queue: QueueBackend, read_models: ReadModelTables | None = None
) -> Handler:
    async def cleanup(ctx: HandlerContext) -> dict[str, Any]:
        """Prunes, for executions finished before the retention (``payload
        ["retention_hours"]``, default 24): the queue's tombstones (they only guard
        against a late redelivery, which cannot come that late) and, given the read
        models' database, the completed, cancelled and discarded executions there with
        their attempts (dead letters stay until requeued or discarded)."""
        before = datetime.now(tz=UTC) - timedelta(hours=_retention_hours(ctx.payload))
        pruned = {name: queue.prune_tombstones(name, before=before) for name in queue.queues()}
        summary: dict[str, Any] = {"tombstones_pruned": pruned, "before": before.isoformat()}
        if read_models is not None:
            # A blocking database call: off the event loop, which runs other attempts.
            executions = await asyncio.to_thread(read_models.prune_finished, before=before)
            summary["executions_pruned"] = executions
        ctx.log.info("handler.cleanup", **summary)
        return summary

    return cleanup


def _retention_hours(payload: dict[str, Any]) -> float:
    try:
        hours = float(payload.get("retention_hours", DEFAULT_RETENTION_HOURS))
    except (TypeError, ValueError):
        raise HandlerError(f"{NAME}: retention_hours must be a number of hours") from None
    if hours < 1:
        raise HandlerError(f"{NAME}: retention_hours must be 1 or more")
    return hours
