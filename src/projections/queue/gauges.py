"""The queue's gauges: depths, pauses, limits and the projection lag, read from the
queue backend (by the scheduler's metrics loop and the projector's)."""

from datetime import datetime

from jobledger.infra.metrics import Metrics
from jobledger.projections.queue.backend import QueueBackend


def observe_queue(metrics: Metrics, queue: QueueBackend, *, now: datetime, head: int) -> None:
    """Refresh the queue gauges (called by the scheduler's metrics loop)."""
    pauses = queue.pauses()
    for name in queue.queues():
        depths = queue.depths(name, now=now)
        for state in ("ready", "delayed", "leased", "dead"):
            metrics.queue_depth.labels(queue=name, state=state).set(getattr(depths, state))
        pause = pauses.get(name)
        metrics.queue_paused.labels(queue=name).set(int(pause is not None and pause.paused))
    _observe_limits(metrics, queue, now)
    meta = queue.read_meta()
    metrics.projection_lag.set(max(head - (meta.position if meta else 0), 0))


def _observe_limits(metrics: Metrics, queue: QueueBackend, now: datetime) -> None:
    """One series per limit key in use or waited for: keys that went idle are
    dropped, so per-customer keys do not pile up series."""
    metrics.limit_in_use.clear()
    metrics.limit_waiting.clear()
    for name in queue.queues():
        for usage in queue.limit_usage(name, now=now):
            if usage.in_use == 0 and usage.waiting == 0:
                continue
            labels = {"queue": name, "kind": usage.kind, "limit": usage.key}
            metrics.limit_in_use.labels(**labels).set(usage.in_use)
            metrics.limit_waiting.labels(**labels).set(usage.waiting)
