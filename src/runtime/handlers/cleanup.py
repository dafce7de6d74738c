"""``system.cleanup``: forget what only served finished executions. The log is never
touched: it is the history."""

from datetime import UTC, datetime, timedelta
from typing import Any

from jobledger.projections.queue import QueueBackend
from jobledger.runtime.handlers.base import Handler, HandlerContext, HandlerError

NAME = "system.cleanup"
DEFAULT_RETENTION_HOURS = 24.0


def make_cleanup_handler(queue: QueueBackend) -> Handler:
    async def cleanup(ctx: HandlerContext) -> dict[str, Any]:
        """Prunes the queue's tombstones of executions finished before the retention
        (``payload["retention_hours"]``, default 24): they only guard against a late
        redelivery, which cannot come that late."""
        try:
            hours = float(ctx.payload.get("retention_hours", DEFAULT_RETENTION_HOURS))
        except (TypeError, ValueError):
            raise HandlerError(f"{NAME}: retention_hours must be a number of hours") from None
        if hours < 1:
            raise HandlerError(f"{NAME}: retention_hours must be 1 or more")
        before = datetime.now(tz=UTC) - timedelta(hours=hours)
        pruned = {name: queue.prune_tombstones(name, before=before) for name in queue.queues()}
        ctx.log.info("handler.cleanup", execution_id=str(ctx.execution_id), pruned=pruned)
        return {"tombstones_pruned": pruned, "before": before.isoformat()}

    return cleanup
