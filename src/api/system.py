"""Health, readiness, metrics, workers, the audit log and the admin queue operations."""

import threading
from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
import structlog
from eventsourcing.persistence import StoredEvent
from litestar import Controller, Request, Response, get, post
from litestar.params import FromQuery, JSONBody, QueryParameter
from litestar.status_codes import HTTP_202_ACCEPTED, HTTP_503_SERVICE_UNAVAILABLE
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobledger.api.common import Limit, Since, Until, aware, state_of
from jobledger.api.errors import ApiError
from jobledger.api.schemas import NO_NUL, EventOut, EventPage, event_out
from jobledger.api.security import ADMIN, OPEN, VIEWER, actor
from jobledger.api.state import ApiState, TaskStatus
from jobledger.domain.ledger import Ledger
from jobledger.domain.undecodable import decode_or_placeholder
from jobledger.projections import read_queries
from jobledger.projections.log import LogRow
from jobledger.projections.quarantine import (
    QuarantinedEvent,
    RetryReport,
    RetryStoppedError,
    event_type,
)
from jobledger.projections.queue import Depths
from jobledger.projections.queue_projection import LogReader
from jobledger.runtime.presence import WorkerInfo

log = structlog.get_logger(__name__)

# A worker that missed this many heartbeats is no longer listed as live.
_STALE_AFTER_BEATS = 3
_AUDIT_SCAN_LIMIT = 50_000


class Check(msgspec.Struct):
    ok: bool
    detail: str


class Readiness(msgspec.Struct):
    ready: bool
    checks: dict[str, Check]
    # The stores that cannot be reached now (postgresql, redis), if any.
    unreachable: list[str] = msgspec.field(default_factory=list)
    # Events a follower set aside: the process serves (200), the projections are
    # degraded until the events are retried (ADR "quarantined events").
    degraded: bool = False
    quarantined: int = 0


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
    minutes: list[read_queries.MinuteStats]
    quarantined: int = 0
    quarantined_events: list[QuarantinedEvent] = msgspec.field(default_factory=list)


class VerifyReport(msgspec.Struct):
    ok: bool
    differences: list[str]
    quarantined: list[str] = msgspec.field(default_factory=list)


class QuarantineRetryIn(msgspec.Struct, forbid_unknown_fields=True):
    """Which quarantined events to apply again: ``ids`` (with their streams), or all."""

    ids: list[Annotated[int, msgspec.Meta(ge=1)]] | None = None
    all: bool = False


class QuarantineFailure(msgspec.Struct):
    id: int
    error: str


class QuarantineRetryOut(msgspec.Struct):
    applied: list[int]
    failed: list[QuarantineFailure]
    waiting: list[int]
    missing: list[int]
    remaining: int


# The system page lists at most this many quarantined events (the CLI lists all).
_QUARANTINE_SHOWN = 100


@get("/health", opt=OPEN, sync_to_thread=False, tags=["system"])
def health() -> dict[str, str]:
    """The process answers (no dependency is checked: see /ready)."""
    return {"status": "ok"}


@get("/ready", opt=OPEN, sync_to_thread=True, tags=["system"])
def ready(request: Request[Any, Any, Any]) -> Response[Readiness]:
    """The store, the queue backend and the projections answer, and the projections are
    close to the head of the log."""
    state = state_of(request)
    checks, unreachable = _dependency_checks(state)
    if not unreachable:  # the lags need both
        checks |= _lag_checks(state)
    ok = all(c.ok for c in checks.values())
    quarantined = _quarantined_count(state) if ok else 0
    body = Readiness(ok, checks, unreachable, degraded=quarantined > 0, quarantined=quarantined)
    return Response(body, status_code=200 if ok else HTTP_503_SERVICE_UNAVAILABLE)


def _quarantined_count(state: ApiState) -> int:
    try:
        return state.container.quarantine().count()
    except Exception as error:  # noqa: BLE001 (the store check reports an unreachable store)
        log.warning("api.quarantine_unreadable", error=str(error))
        return 0


def _dependency_checks(state: ApiState) -> tuple[dict[str, Check], list[str]]:
    """The store and the queue backend, each probed; an outage goes to the tracker."""
    checks: dict[str, Check] = {}
    unreachable: list[str] = []
    health = state.container.health
    for name, (dependency, probe) in state.container.probes().items():
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


def _lag_checks(state: ApiState) -> dict[str, Check]:
    limit = state.container.settings.ready_max_lag
    return {
        f"{name}_lag": Check(ok=lag <= limit, detail=f"{lag} events behind")
        for name, lag in _lags(state).items()
    }


def _lags(state: ApiState) -> dict[str, int]:
    container = state.container
    head = container.head()
    meta = container.queue.read_meta()
    return {
        "queue": max(head - (meta.position if meta else 0), 0),
        "read_models": container.read_models().lag(),
    }


@get("/metrics", opt=OPEN, sync_to_thread=True, tags=["system"], include_in_schema=False)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    registry = state_of(request).container.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def live_workers(state: ApiState) -> list[WorkerInfo]:
    container = state.container
    stale = timedelta(seconds=container.settings.worker_lease_ttl_seconds / 3 * _STALE_AFTER_BEATS)
    return container.presence.live(now=state.now(), stale_after=stale)


class SystemController(Controller):
    path = "/api/v1"
    tags = ["system"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/workers", opt=VIEWER, sync_to_thread=True)
    def workers(self, request: Request[Any, Any, Any]) -> list[WorkerInfo]:
        """Live workers: queues, slots, running executions, last heartbeat."""
        return live_workers(state_of(request))

    @get("/metrics/system", opt=VIEWER, sync_to_thread=True)
    def system(self, request: Request[Any, Any, Any]) -> SystemView:
        return system_view(state_of(request))

    @get("/audit/events", opt=VIEWER, sync_to_thread=True)
    def audit_events(
        self,
        request: Request[Any, Any, Any],
        *,
        after: Annotated[int, QueryParameter(ge=0, description="log position to read after")] = 0,
        types: Annotated[
            str | None,
            QueryParameter(
                max_length=2000, pattern=NO_NUL, description="comma-separated event types"
            ),
        ] = None,
        since: Since = None,
        until: Until = None,
        limit: Limit = 100,
    ) -> EventPage:
        """The whole log in order, a page at a time; follow ``next_after``."""
        return audit_page(
            state_of(request),
            after=after,
            types=frozenset(t.strip() for t in (types or "").split(",") if t.strip()),
            since=aware("since", since),
            until=aware("until", until),
            limit=limit,
        )

    @post("/admin/queue/rebuild", opt=ADMIN, sync_to_thread=True, status_code=HTTP_202_ACCEPTED)
    def rebuild_queue(
        self, request: Request[Any, Any, Any], *, full: FromQuery[bool] = False
    ) -> TaskStatus:
        """Rebuild the queue from the log in the background; poll the GET for progress."""
        state = state_of(request)
        if not state.start_task(state.rebuild, state.now()):
            raise ApiError(409, "a queue rebuild is already running", fix="wait for it to end")
        # Asked for, not lost: a distinct event, so the alert on queue.lost stays quiet.
        by = actor(request)
        log.info("queue.rebuild_requested", requested_by=by, full=full, via="api")
        threading.Thread(
            target=_rebuild, args=(state, full, by), name="queue-rebuild", daemon=True
        ).start()
        return state.rebuild

    @get("/admin/queue/rebuild", opt=ADMIN, sync_to_thread=False)
    def rebuild_status(self, request: Request[Any, Any, Any]) -> TaskStatus:
        return state_of(request).rebuild

    @get("/admin/queue/verify", opt=ADMIN, sync_to_thread=True)
    def verify(self, request: Request[Any, Any, Any]) -> VerifyReport:
        """Compare the queue with a fold of the log; lists every difference."""
        differences, found = state_of(request).container.verify_queue()
        rows = [(e.position, e.topic, e.originator_id, e.error) for e in found.waiting]
        rows += [(r[0], r[3], str(r[1]), error) for r, error in found.unrecorded]
        quarantined = [f"position {p} ({event_type(t)} of {o}): {e}" for p, t, o, e in rows]
        return VerifyReport(not differences and not quarantined, differences, quarantined)

    @get("/admin/quarantine", opt=ADMIN, sync_to_thread=True)
    def quarantine(self, request: Request[Any, Any, Any]) -> list[QuarantinedEvent]:
        """Events a follower could not apply, in log order."""
        return state_of(request).container.quarantine().events()

    @post("/admin/quarantine/retry", opt=ADMIN, sync_to_thread=True, status_code=200)
    def retry_quarantine(
        self, request: Request[Any, Any, Any], data: JSONBody[QuarantineRetryIn]
    ) -> QuarantineRetryOut:
        """Apply quarantined events again, each in the follower it failed in."""
        if data.all == (data.ids is not None):
            raise ApiError(422, "give either ids or all", fix='send {"ids": [1]} or {"all": true}')
        container = state_of(request).container
        try:
            report = container.retry_quarantined(None if data.all else data.ids)
        except RetryStoppedError as error:
            raise ApiError(503, str(error), fix="retry when the store and queue answer") from None
        return _retry_out(report, remaining=container.quarantine().count())


def _retry_out(report: RetryReport, *, remaining: int) -> QuarantineRetryOut:
    return QuarantineRetryOut(
        applied=[event.id for event in report.applied],
        failed=[QuarantineFailure(event.id, error) for event, error in report.failed],
        waiting=[event.id for event in report.waiting],
        missing=report.missing,
        remaining=remaining,
    )


def system_view(state: ApiState) -> SystemView:
    container, now = state.container, state.now()
    workers = live_workers(state)
    leader, epoch = container.leader_status()
    quarantined = container.quarantine().events()
    return SystemView(
        now=now,
        counts=read_queries.status_counts(state.database),
        queues=[
            QueueDepths(q, container.queue.depths(q, now=now))
            for q in sorted(container.queue.queues())
        ],
        workers=len(workers),
        slots_in_use=sum(len(w.running) for w in workers),
        leader=leader,
        leader_epoch=epoch,
        projection_lag=_lags(state),
        breakers=state.breaker_states(),
        minutes=read_queries.minute_stats(
            state.database, since=now - timedelta(hours=1), until=now
        ),
        quarantined=len(quarantined),
        quarantined_events=quarantined[-_QUARANTINE_SHOWN:],
    )


def audit_page(
    state: ApiState,
    *,
    after: int,
    types: frozenset[str],
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> EventPage:
    # Every topic: operators' job changes as well as the executions' lifecycles.
    reader = LogReader(state.container.ledger, topics=())
    head = reader.head()
    items: list[EventOut] = []
    position = after
    while len(items) < limit and position < head and position - after < _AUDIT_SCAN_LIMIT:
        page = reader.rows(position, limit=500)
        for row in page.rows:
            position = row[0]
            out = event_out(_shown(state.container.ledger, row), position=row[0])
            if _wanted(out.type, out.timestamp, types, since, until):
                items.append(out)
                if len(items) == limit:
                    break
        else:
            position = page.position
    return EventPage(items, position, head)


def _shown(ledger: Ledger, row: LogRow) -> Any:  # noqa: ANN401 (any event, or its placeholder)
    position, originator_id, version, topic, state = row
    stored = StoredEvent(
        originator_id=originator_id, originator_version=version, topic=topic, state=state
    )
    return decode_or_placeholder(ledger.mapper, stored, position)


def _wanted(
    kind: str,
    at: datetime | None,
    types: frozenset[str],
    since: datetime | None,
    until: datetime | None,
) -> bool:
    return (
        (not types or kind in types)
        # An undecodable event has no known time: shown whatever the time filter.
        and (at is None or since is None or at >= since)
        and (at is None or until is None or at <= until)
    )


def _rebuild(state: ApiState, full: bool, by: str) -> None:  # noqa: FBT001 (a thread target)
    status = state.rebuild

    def progress(done: int, total: int) -> None:
        status.done, status.total = done, total

    projector = state.container.projector()
    try:
        report = projector.queue.rebuild(full=full, progress=progress, requested_by=by)
        status.message = f"{report.items} open executions from the {report.source}"
        if report.quarantined:
            status.message += f"; {report.quarantined}"
        status.state = "done"  # the projection logged queue.rebuilt, naming who asked
    except Exception as error:
        status.state, status.message = "failed", f"{type(error).__name__}: {error}"
        log.exception("queue.rebuild_failed", requested_by=by)
    finally:
        projector.close()
        status.finished_at = state.now()
