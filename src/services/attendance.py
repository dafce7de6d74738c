"""Whether workers serve a queue: a run sent to a queue no live worker leases from is
still accepted (a worker may start later), but the answer says it will wait, and the
queue list and the system page show the queue as unserved, and since when.

A queue is served while a worker that lists it reports itself (presence); the time a
worker last reported serving a queue is kept after it left, so an unserved queue says
since when. An idle served queue has no leases yet is served, so this goes by what
workers report, not by leases (ADR 82).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog

from jobledger.infra.outages import OUTAGE_ERRORS
from jobledger.infra.presence import Presence
from jobledger.infra.settings import Settings

log = structlog.get_logger(__name__)

# A worker that missed this many heartbeats (a third of its lease ttl apart) is gone.
STALE_AFTER_BEATS = 3


def stale_after(settings: Settings) -> timedelta:
    """How long a worker's last report keeps it listed: three heartbeats."""
    return timedelta(seconds=settings.worker_lease_ttl_seconds / 3 * STALE_AFTER_BEATS)


@dataclass(frozen=True)
class Service:
    """How a queue is served at a moment: by how many live workers, and if by none,
    when one last served it (None: none did, as far as presence remembers)."""

    workers: int
    last_served: datetime | None

    @property
    def served(self) -> bool:
        return self.workers > 0

    @property
    def unserved_since(self) -> datetime | None:
        return None if self.served else self.last_served


# A queue no worker has reported serving (as far as presence remembers).
NEVER = Service(0, None)

# How long a read of which queues are served answers a run's warning: an API process
# sending runs one at a time to served queues reads presence once in this, not once a
# run. A queue not served then is read again at once, so a worker that just started
# is seen; one that just left stays counted this much longer than its heartbeats say.
SERVED_KEPT_FOR = timedelta(seconds=1)


class _RecentlyServed:
    """The queues live workers served at the last read, and when it was made."""

    def __init__(self) -> None:
        self._read: tuple[datetime, frozenset[str]] | None = None  # swapped whole

    def queues(self, at: datetime) -> frozenset[str]:
        read = self._read
        if read is None or not timedelta(0) <= at - read[0] < SERVED_KEPT_FOR:
            return frozenset()
        return read[1]

    def note(self, counts: dict[str, int], at: datetime) -> None:
        self._read = (at, frozenset(queue for queue, live in counts.items() if live))


@dataclass(frozen=True)
class Attendance:
    """Which queues live workers serve, from the workers' own reports."""

    presence: Presence
    stale_after: timedelta
    _served: _RecentlyServed = field(default_factory=_RecentlyServed, compare=False)

    def services(self, *, at: datetime) -> dict[str, Service]:
        """Each queue any worker ever reported serving (as far as presence keeps it),
        with its live workers now; a queue never served is absent."""
        counts = self._live_counts(at)
        last = self.presence.last_served()
        return {
            queue: Service(counts.get(queue, 0), last.get(queue))
            for queue in sorted({*counts, *last})
        }

    def warnings(self, queues: Iterable[str], *, at: datetime) -> list[str]:
        """One warning per queue of ``queues`` no live worker serves, naming the fix;
        none while the workers' reports cannot be read: a run goes into the log whether
        or not Redis answers, and a warning must not turn that into a refusal. When
        every queue is served (the common case) the last-served times are not read,
        nor, within ``SERVED_KEPT_FOR`` of the last read, the live workers."""
        queues = set(queues)
        if queues <= self._served.queues(at):
            return []
        try:
            counts = self._live_counts(at)
            self._served.note(counts, at)
            unserved = sorted({q for q in queues if not counts.get(q)})
            last = self.presence.last_served() if unserved else {}
        except OUTAGE_ERRORS as error:
            log.info("queue.attendance_unknown", error=type(error).__name__)
            return []
        for queue in unserved:
            log.info("queue.unserved_run", queue=queue)
        return [self._warning(queue, last.get(queue)) for queue in unserved]

    def _live_counts(self, at: datetime) -> dict[str, int]:
        """How many live workers serve each queue that has any."""
        counts: dict[str, int] = {}
        for worker in self.presence.live(now=at, stale_after=self.stale_after):
            for queue in worker.queues:
                counts[queue] = counts.get(queue, 0) + 1
        return counts

    def _warning(self, queue: str, last: datetime | None) -> str:
        seconds = f"{self.stale_after.total_seconds():g}"
        since = f" (last served {last.isoformat(timespec='seconds')})" if last else ""
        return (
            f"no worker has leased from queue '{queue}' within {seconds} seconds{since}: "
            f"the run waits until one does; start a worker with "
            f"JOBLEDGER_WORKER_QUEUES={queue} (or add '{queue}' to a worker's "
            f"JOBLEDGER_WORKER_QUEUES)"
        )
