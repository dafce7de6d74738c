"""Health, readiness, metrics, workers, the audit log and the admin queue operations."""

import threading
from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
import structlog
from litestar import Controller, Request, Response, get, post
from litestar.params import FromQuery, QueryParameter
from litestar.status_codes import HTTP_202_ACCEPTED, HTTP_503_SERVICE_UNAVAILABLE
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobledger.api.common import Limit, Since, Until, aware, state_of
from jobledger.api.errors import ApiError
from jobledger.api.schemas import NO_NUL, EventOut, EventPage, event_out
from jobledger.api.security import ADMIN, OPEN, VIEWER
from jobledger.api.state import ApiState, TaskStatus
from jobledger.projections import read_queries
from jobledger.projections.queue import Depths
from jobledger.projections.queue_projection import LogReader, verify_queue
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


class VerifyReport(msgspec.Struct):
    ok: bool
    differences: list[str]


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
    return Response(
        Readiness(ok, checks, unreachable), status_code=200 if ok else HTTP_503_SERVICE_UNAVAILABLE
    )


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
        threading.Thread(
            target=_rebuild, args=(state, full), name="queue-rebuild", daemon=True
        ).start()
        return state.rebuild

    @get("/admin/queue/rebuild", opt=ADMIN, sync_to_thread=False)
    def rebuild_status(self, request: Request[Any, Any, Any]) -> TaskStatus:
        return state_of(request).rebuild

    @get("/admin/queue/verify", opt=ADMIN, sync_to_thread=True)
    def verify(self, request: Request[Any, Any, Any]) -> VerifyReport:
        """Compare the queue with a fold of the log; lists every difference."""
        container = state_of(request).container
        differences = verify_queue(container.reader(), container.queue)
        return VerifyReport(not differences, differences)


def system_view(state: ApiState) -> SystemView:
    container, now = state.container, state.now()
    workers = live_workers(state)
    leader, epoch = container.leader_status()
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
        for row, domain_event in zip(page.rows, reader.events(page.rows), strict=True):
            position = row[0]
            out = event_out(domain_event, position=row[0])
            if _wanted(out.type, out.timestamp, types, since, until):
                items.append(out)
                if len(items) == limit:
                    break
        else:
            position = page.position
    return EventPage(items, position, head)


def _wanted(
    kind: str,
    at: datetime,
    types: frozenset[str],
    since: datetime | None,
    until: datetime | None,
) -> bool:
    return (
        (not types or kind in types)
        and (since is None or at >= since)
        and (until is None or at <= until)
    )


def _rebuild(state: ApiState, full: bool) -> None:  # noqa: FBT001 (a thread target)
    status = state.rebuild

    def progress(done: int, total: int) -> None:
        status.done, status.total = done, total

    try:
        report = state.container.projector().queue.rebuild(full=full, progress=progress)
        status.message = f"{report.items} open executions from the {report.source}"
        status.state = "done"
        log.info("api.queue_rebuilt", items=report.items, source=report.source)
    except Exception as error:
        status.state, status.message = "failed", f"{type(error).__name__}: {error}"
        log.exception("api.queue_rebuild_failed")
    finally:
        status.finished_at = state.now()
