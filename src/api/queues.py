"""Queues: their depths and pauses; pause, resume and drain one (operator)."""

from typing import Annotated

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, PathParameter
from litestar.status_codes import HTTP_200_OK

from jobledger.api.common import Cursor, Limit
from jobledger.api.security import OPERATOR, VIEWER
from jobledger.domain.clock import Clock
from jobledger.schemas.queues import DrainIn, DrainReport, PauseIn, QueueList, QueueStateOut
from jobledger.services.actors import Actor
from jobledger.services.queues import Queues

# The domain checks the name and names the fix; this only bounds what reaches it.
QueueName = Annotated[str, PathParameter(max_length=64, description="the queue's name")]


class QueueController(Controller):
    path = "/api/v1/queues"
    tags = ["queues"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_queues(
        self,
        queues: NamedDependency[Queues],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> QueueList:
        """The queues by name, with their entries by state, and whether (by whom, since
        when, why) each is paused; a page at a time (follow ``next_cursor``)."""
        return queues.page(at=clock(), by=actor, limit=limit, cursor=cursor)

    @post("/{name:str}/pause", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def pause_queue(
        self,
        name: FromPath[QueueName],
        data: JSONBody[PauseIn],
        queues: NamedDependency[Queues],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> QueueStateOut:
        """Stop leasing from the queue (running work finishes); a paused queue stays
        paused (``changed`` false)."""
        return queues.pause(name, reason=data.reason, at=clock(), by=actor)

    @post("/{name:str}/resume", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def resume_queue(
        self,
        name: FromPath[QueueName],
        queues: NamedDependency[Queues],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> QueueStateOut:
        """Lease from the queue again; a running queue stays as it is (``changed`` false)."""
        return queues.resume(name, at=clock(), by=actor)

    @post("/{name:str}/drain", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def drain_queue(
        self,
        name: FromPath[QueueName],
        data: JSONBody[DrainIn],
        queues: NamedDependency[Queues],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> DrainReport:
        """Cancel the queue's pending runs (running ones finish); ``dry_run`` lists the
        runs it would cancel and cancels none."""
        return queues.drain(name, reason=data.reason, at=clock(), by=actor, dry_run=data.dry_run)
