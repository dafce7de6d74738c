"""How the system is doing: readiness, the overview's numbers, live workers, the
leader, the breakers, and pages of the whole log (the audit)."""

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import msgspec
import structlog
from eventsourcing.persistence import StoredEvent

from jobledger.infra.outages import DependencyHealth
from jobledger.infra.presence import Presence, WorkerInfo
from jobledger.infra.settings import Settings
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LogRow
from jobledger.persistence.undecodable import decode_or_placeholder
from jobledger.projections.log.reader import LogReader
from jobledger.projections.quarantine import Quarantine
from jobledger.projections.queue.backend import Depths, QueueBackend
from jobledger.projections.read_models.follower import ReadModels
from jobledger.schemas.rows import ProgressRow
from jobledger.schemas.system import Check, Readiness
from jobledger.services.attendance import stale_after
from jobledger.services.history import EventOut, EventPage, event_out
from jobledger.services.views import MinuteStats, Views

__all__ = ["Check", "QueueDepths", "Readiness", "System", "SystemView", "WorkerInfo"]

log = structlog.get_logger(__name__)

_AUDIT_SCAN_LIMIT = 50_000
# The system page lists at most this many quarantined events (the CLI lists all).
_QUARANTINE_SHOWN = 100


class QueueDepths(msgspec.Struct):
    queue: str
    depths: Depths


class SystemView(msgspec.Struct, kw_only=True):
    """The numbers behind the dashboard's overview."""

    now: datetime
    counts: dict[str, dict[str, int]]
    queues: list[QueueDepths]
    workers: int
    slots_in_use: int
    leader: str | None
    leader_epoch: int
    projection_lag: dict[str, int]
    breakers: dict[str, str]
    minutes: list[MinuteStats]
    quarantined: int = 0
    quarantined_events: list[Any] = msgspec.field(default_factory=list)


class BreakerStates(Protocol):
    """The handlers' circuit breakers, as the workers share them."""

    def get(self, handler: str) -> object: ...
    def states(self) -> dict[str, str]: ...


# A check's name -> (the dependency it stands for, a quick probe that raises while it
# cannot be reached and answers what it found).
Probes = dict[str, tuple[str, Callable[[], object]]]


@dataclass(frozen=True)
class Sources:
    """What the system's view reads, handed over by the composition root."""

    ledger: Ledger
    queue: QueueBackend
    presence: Presence
    quarantine: Quarantine
    health: DependencyHealth
    settings: Settings
    probes: Callable[[], Probes]
    read_models: Callable[[], ReadModels]
    # (the leading scheduler's token or None, the leader epoch)
    leader: Callable[[], tuple[str | None, int]]
    breakers: Callable[[], BreakerStates]
    reader: Callable[[], LogReader]  # of every topic


class System:
    def __init__(self, sources: Sources, views: Views, handler_names: frozenset[str]) -> None:
        self._sources = sources
        self._views = views
        self._handler_names = handler_names
        self._lock = threading.Lock()
        self._breakers: BreakerStates | None = None

    # ---- readiness ------------------------------------------------------------------

    def readiness(self) -> Readiness:
        """The store, the queue backend and the projections answer, and the projections
        are close to the head of the log."""
        checks, unreachable = self._dependency_checks()
        if not unreachable:  # the lags need both
            checks |= self._lag_checks()
        ok = all(c.ok for c in checks.values())
        quarantined = self._quarantined_count() if ok else 0
        return Readiness(ok, checks, unreachable, degraded=quarantined > 0, quarantined=quarantined)

    def _quarantined_count(self) -> int:
        try:
            return self._sources.quarantine.count()
        except Exception as error:  # noqa: BLE001 (the store check reports an unreachable store)
            log.warning("api.quarantine_unreadable", error=str(error))
            return 0

    def _dependency_checks(self) -> tuple[dict[str, Check], list[str]]:
        """The store and the queue backend, each probed; an outage goes to the tracker."""
        checks: dict[str, Check] = {}
        unreachable: list[str] = []
        health = self._sources.health
        for name, (dependency, probe) in self._sources.probes().items():
            try:
                checks[name] = Check(ok=True, detail=str(probe()))
            except Exception as error:  # noqa: BLE001 (any failure means "not ready")
                detail = f"{type(error).__name__}: {' '.join(str(error).split())}"
                checks[name] = Check(ok=False, detail=f"{dependency} unreachable: {detail}")
                health.report(error, health.clock())
                unreachable.append(dependency)
            else:
                health.succeeded(dependency, health.clock())
        return checks, unreachable

    def _lag_checks(self) -> dict[str, Check]:
        limit = self._sources.settings.ready_max_lag
        return {
            f"{name}_lag": Check(ok=lag <= limit, detail=f"{lag} events behind")
            for name, lag in self.lags().items()
        }

    def lags(self) -> dict[str, int]:
        """How many events of the log the queue and the read models have not applied."""
        sources = self._sources
        head = self.head()
        meta = sources.queue.read_meta()
        return {
            "queue": max(head - (meta.position if meta else 0), 0),
            "read_models": sources.read_models().lag(),
        }

    # ---- the overview -----------------------------------------------------------------

    def live_workers(self, *, at: datetime) -> list[WorkerInfo]:
        """Live workers: queues, slots, running executions, last heartbeat."""
        sources = self._sources
        return sources.presence.live(now=at, stale_after=stale_after(sources.settings))

    def live_progress(
        self, execution_ids: Sequence[UUID], *, at: datetime
    ) -> dict[UUID, ProgressRow]:
        """The live progress of each of these running executions that reported some."""
        presence = self._sources.presence
        shown = {run: presence.progress_of(run, now=at) for run in execution_ids}
        return {run: progress for run, progress in shown.items() if progress is not None}

    def view(self, *, at: datetime) -> SystemView:
        sources = self._sources
        workers = self.live_workers(at=at)
        leader, epoch = sources.leader()
        quarantined = sources.quarantine.events()
        return SystemView(
            now=at,
            counts=self._views.status_counts(),
            queues=[
                QueueDepths(q, sources.queue.depths(q, now=at))
                for q in sorted(sources.queue.queues())
            ],
            workers=len(workers),
            slots_in_use=sum(len(w.running) for w in workers),
            leader=leader,
            leader_epoch=epoch,
            projection_lag=self.lags(),
            breakers=self.breaker_states(),
            minutes=self._views.minute_stats(since=at - timedelta(hours=1), until=at),
            quarantined=len(quarantined),
            quarantined_events=quarantined[-_QUARANTINE_SHOWN:],
        )

    def breaker_states(self) -> dict[str, str]:
        """Every handler's breaker as the workers share it. Breakers are made on first
        use, so ask about each handler once; the instances then stay."""
        with self._lock:
            if self._breakers is None:
                self._breakers = self._sources.breakers()
                for name in self._handler_names:
                    self._breakers.get(name)
            breakers = self._breakers
        return dict(sorted(breakers.states().items()))

    def describe(self) -> dict[str, Any]:
        """The store and the position of its log."""
        return self._sources.ledger.describe()

    def head(self) -> int:
        """The position of the newest event in the log (0 when it is empty)."""
        return self._sources.ledger.recorder.max_notification_id() or 0

    # ---- the audit ------------------------------------------------------------------

    def audit_page(
        self,
        *,
        after: int,
        types: frozenset[str],
        since: datetime | None,
        until: datetime | None,
        limit: int,
    ) -> EventPage:
        """The whole log in order from ``after``, a page at a time; follow ``next_after``."""
        # Every topic: operators' job changes as well as the executions' lifecycles.
        reader = self._sources.reader()
        head = reader.head()
        items: list[EventOut] = []
        position = after
        wanted = _Wanted(types, since, until)
        while len(items) < limit and position < head and position - after < _AUDIT_SCAN_LIMIT:
            page = reader.rows(position, limit=500)
            for row in page.rows:
                position = row[0]
                out = event_out(self._shown(row), position=row[0])
                if wanted(out):
                    items.append(out)
                    if len(items) == limit:
                        break
            else:
                position = page.position
        return EventPage(items, position, head)

    def _shown(self, row: LogRow) -> Any:  # noqa: ANN401 (any event, or its placeholder)
        position, originator_id, version, topic, state = row
        stored = StoredEvent(
            originator_id=originator_id, originator_version=version, topic=topic, state=state
        )
        return decode_or_placeholder(self._sources.ledger.mapper, stored, position)


class _Wanted:
    """The audit's filter: event types, and a time window (an undecodable event has no
    known time: shown whatever the time filter)."""

    def __init__(
        self, types: frozenset[str], since: datetime | None, until: datetime | None
    ) -> None:
        self.types, self.since, self.until = types, since, until

    def __call__(self, out: EventOut) -> bool:
        at = out.timestamp
        return (
            (not self.types or out.type in self.types)
            and (at is None or self.since is None or at >= self.since)
            and (at is None or self.until is None or at <= self.until)
        )
