"""Health, readiness, metrics, workers, the audit log and the admin queue operations."""

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromQuery, JSONBody, QueryParameter
from litestar.status_codes import HTTP_202_ACCEPTED, HTTP_503_SERVICE_UNAVAILABLE
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobledger.api.common import Cursor, Limit, Since, Until, aware, linked
from jobledger.api.errors import ApiError
from jobledger.api.schemas import NO_NUL
from jobledger.api.security import ADMIN, OPEN, VIEWER, api_state
from jobledger.domain.clock import Clock
from jobledger.services.actors import Actor
from jobledger.services.admin import Admin, QuarantinedEvent, RetryReport, TaskStatus, event_type
from jobledger.services.history import EventPage
from jobledger.services.pages import Order
from jobledger.services.system import Readiness, System, SystemView, WorkerInfo


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


@get("/health", opt=OPEN, sync_to_thread=False, tags=["system"])
def health() -> dict[str, str]:
    """The process answers (no dependency is checked: see /ready)."""
    return {"status": "ok"}


@get("/ready", opt=OPEN, sync_to_thread=True, tags=["system"])
def ready(system: NamedDependency[System]) -> Response[Readiness]:
    """The store, the queue backend and the projections answer, and the projections are
    close to the head of the log."""
    body = system.readiness()
    return Response(body, status_code=200 if body.ready else HTTP_503_SERVICE_UNAVAILABLE)


@get("/metrics", opt=OPEN, sync_to_thread=True, tags=["system"], include_in_schema=False)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    registry = api_state(request).ports.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def parse_types(text: str | None) -> frozenset[str]:
    """A comma-separated list of event types."""
    return frozenset(t.strip() for t in (text or "").split(",") if t.strip())


class SystemController(Controller):
    path = "/api/v1"
    tags = ["system"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/workers", opt=VIEWER, sync_to_thread=True)
    def workers(
        self,
        request: Request[Any, Any, Any],
        system: NamedDependency[System],
        clock: NamedDependency[Clock],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[WorkerInfo]]:
        """Live workers by id: queues, slots, running executions, last heartbeat. A page
        at a time: the ``Link`` header names the next."""
        live = system.live_workers(at=clock())
        return linked(request, live, WORKERS, limit=limit, cursor=cursor)

    @get("/metrics/system", opt=VIEWER, sync_to_thread=True)
    def system(self, system: NamedDependency[System], clock: NamedDependency[Clock]) -> SystemView:
        return system.view(at=clock())

    @get("/audit/events", opt=VIEWER, sync_to_thread=True)
    def audit_events(
        self,
        system: NamedDependency[System],
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
        return system.audit_page(
            after=after,
            types=parse_types(types),
            since=aware("since", since),
            until=aware("until", until),
            limit=limit,
        )

    @post("/admin/queue/rebuild", opt=ADMIN, sync_to_thread=True, status_code=HTTP_202_ACCEPTED)
    def rebuild_queue(
        self,
        admin: NamedDependency[Admin],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        *,
        full: FromQuery[bool] = False,
    ) -> TaskStatus:
        """Rebuild the queue from the log in the background; poll the GET for progress."""
        return admin.start_queue_rebuild(full=full, by=actor, clock=clock)

    @get("/admin/queue/rebuild", opt=ADMIN, sync_to_thread=False)
    def rebuild_status(self, admin: NamedDependency[Admin]) -> TaskStatus:
        return admin.rebuild_task

    @get("/admin/queue/verify", opt=ADMIN, sync_to_thread=True)
    def verify(self, admin: NamedDependency[Admin], actor: NamedDependency[Actor]) -> VerifyReport:
        """Compare the queue with a fold of the log; lists every difference."""
        differences, found = admin.verify_queue(by=actor)
        rows = [(e.position, e.topic, e.originator_id, e.error) for e in found.waiting]
        rows += [(r[0], r[3], str(r[1]), error) for r, error in found.unrecorded]
        quarantined = [f"position {p} ({event_type(t)} of {o}): {e}" for p, t, o, e in rows]
        return VerifyReport(not differences and not quarantined, differences, quarantined)

    @get("/admin/quarantine", opt=ADMIN, sync_to_thread=True)
    def quarantine(
        self,
        request: Request[Any, Any, Any],
        admin: NamedDependency[Admin],
        actor: NamedDependency[Actor],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[QuarantinedEvent]]:
        """Events a follower could not apply, in the order they were quarantined. A
        page at a time: the ``Link`` header names the next."""
        found = admin.quarantined(by=actor)
        return linked(request, found, QUARANTINE, limit=limit, cursor=cursor)

    @post("/admin/quarantine/retry", opt=ADMIN, sync_to_thread=True, status_code=200)
    def retry_quarantine(
        self,
        data: JSONBody[QuarantineRetryIn],
        admin: NamedDependency[Admin],
        actor: NamedDependency[Actor],
    ) -> QuarantineRetryOut:
        """Apply quarantined events again, each in the follower it failed in."""
        if data.all == (data.ids is not None):
            raise ApiError(422, "give either ids or all", fix='send {"ids": [1]} or {"all": true}')
        report = admin.retry_quarantined(None if data.all else data.ids, by=actor)
        return _retry_out(report, remaining=admin.quarantined_count())


def _retry_out(report: RetryReport, *, remaining: int) -> QuarantineRetryOut:
    return QuarantineRetryOut(
        applied=[event.id for event in report.applied],
        failed=[QuarantineFailure(event.id, error) for event, error in report.failed],
        waiting=[event.id for event in report.waiting],
        missing=report.missing,
        remaining=remaining,
    )


WORKERS = Order[WorkerInfo]("workers", lambda worker: (worker.worker_id,))
QUARANTINE = Order[QuarantinedEvent]("quarantine", lambda event: (event.id,))
