"""Prometheus metrics of a jobledger process, in a registry of its own.

The composition root builds one ``Metrics`` per process and hands it to the parts
that count. Names follow Prometheus conventions (``_total`` counters, base units).
"""

from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from jobledger.projections.queue import QueueBackend


def _registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=_registry)

    def __post_init__(self) -> None:
        r = self.registry
        self.fires = Counter("jobledger_fires_total", "Occurrences fired.", registry=r)
        self.fires_missed = Counter(
            "jobledger_fires_missed_total",
            "Occurrences that will never fire (alert on any increase).",
            ["reason"],
            registry=r,
        )
        self.fire_conflicts = Counter(
            "jobledger_fire_conflicts_total",
            "Fires rejected because another scheduler fired first (duplicates prevented).",
            registry=r,
        )
        self.fire_lateness = Histogram(
            "jobledger_fire_lateness_seconds",
            "From an occurrence's scheduled time to its fire being saved.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
            registry=r,
        )
        self.leader = Gauge("jobledger_leader", "1 while this scheduler leads.", registry=r)
        self.leader_changes = Counter(
            "jobledger_leader_changes_total", "Leadership gained or lost.", registry=r
        )
        self.leases_expired = Counter(
            "jobledger_lease_expiries_total", "Leases that ran out without a report.", registry=r
        )
        self.queue_depth = Gauge(
            "jobledger_queue_depth", "Entries per queue and state.", ["queue", "state"], registry=r
        )
        self.projection_lag = Gauge(
            "jobledger_projection_lag_events",
            "Events in the log that the queue projection has not applied yet.",
            registry=r,
        )

    def observe_queue(self, queue: QueueBackend, *, now: datetime, head: int) -> None:
        """Refresh the queue gauges (called by the scheduler's metrics loop)."""
        for name in queue.queues():
            depths = queue.depths(name, now=now)
            for state in ("ready", "delayed", "leased", "dead"):
                self.queue_depth.labels(queue=name, state=state).set(getattr(depths, state))
        meta = queue.read_meta()
        self.projection_lag.set(max(head - (meta.position if meta else 0), 0))

    def serve(self, port: int) -> None:
        """Expose /metrics on ``port`` (scheduler and worker processes)."""
        start_http_server(port, addr="127.0.0.1", registry=self.registry)
