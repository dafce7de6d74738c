"""Which parts make each role: the one table the CLI's role commands and `jobledger dev`
run from.

A role is a list of part names, started in order and stopped in reverse
(``lifecycle.run_parts``). The composition root builds a part from its name; a part it
cannot have here (the outbox relay without PostgreSQL, the metrics server without a
port) is left out. ``--with-projector`` puts the projector right after the metrics
server, before the role's own parts, so the queue is projected before anything uses it.
"""

from collections.abc import Mapping

METRICS = "metrics"  # this process's /metrics port (the API serves /metrics itself)
PROJECTOR = "projector"
SCHEDULER = "scheduler"
OUTBOX_RELAY = "outbox-relay"  # on PostgreSQL only
WORKER = "worker"
OUTAGE_PROBE = "outage-probe"  # notices an outage, and its end, without traffic
API = "api"

ROLES: Mapping[str, tuple[str, ...]] = {
    "api": (OUTAGE_PROBE, API),
    "scheduler": (METRICS, SCHEDULER, OUTBOX_RELAY),
    "worker": (METRICS, WORKER),
    "projector": (METRICS, PROJECTOR),
    # One process, the embedded default: the projector first (it rebuilds the in-memory
    # queue from the log), the API last (it is served once everything under it runs).
    "dev": (PROJECTOR, SCHEDULER, OUTBOX_RELAY, WORKER, API),
}


def parts_of(role: str, *, with_projector: bool = False) -> tuple[str, ...]:
    """The names of ``role``'s parts, in start order; ``with_projector`` adds the
    projector where it is not one of them already."""
    parts = ROLES[role]
    if not with_projector or PROJECTOR in parts:
        return parts
    at = 1 if parts[0] == METRICS else 0
    return (*parts[:at], PROJECTOR, *parts[at:])
