"""Jobs: define, change, pause, resume, trigger, delete; their history and past states."""

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_202_ACCEPTED

from jobledger.api.budgets import RunBudget
from jobledger.api.common import (
    Cursor,
    Filter,
    IdempotencyKey,
    Limit,
    Offset,
    events_page,
    key_or_new,
    linked,
    outcome_response,
    started_response,
)
from jobledger.api.errors import ApiError
from jobledger.api.schedules import preview_fires
from jobledger.api.schemas import (
    NO_NUL,
    BackfillIn,
    BackfillReport,
    DependenciesOut,
    JobIn,
    JobLink,
    JobOut,
    JobPatch,
    PreviewOut,
    ReasonIn,
    from_definition,
    job_out,
    job_status,
    patched,
    to_definition,
    to_unique,
)
from jobledger.api.security import OPERATOR, VIEWER
from jobledger.domain.clock import Clock
from jobledger.domain.job import Job
from jobledger.domain.json_values import MAX_INT
from jobledger.domain.policies import WaitFor
from jobledger.schemas.executions import ExecutionRef, TriggerIn
from jobledger.schemas.handlers import HandlerOut
from jobledger.schemas.jobs import ApplyIn, ApplyOut
from jobledger.services.actors import Actor
from jobledger.services.declared_jobs import DeclaredJobs
from jobledger.services.history import EventOut
from jobledger.services.jobs import Jobs
from jobledger.services.pages import Order
from jobledger.services.queues import Queues
from jobledger.services.views import Page, Views

AsOf = Annotated[
    str | None,
    QueryParameter(
        max_length=64,
        pattern=NO_NUL,
        description="the job as it was: an ISO 8601 time with offset, or a version number",
    ),
]


Override = Annotated[
    bool,
    QueryParameter(
        description="change a job that code manages by hand (recorded in the event); the "
        "next `jobledger apply` puts the code's definition back"
    ),
]


class JobController(Controller):
    path = "/api/v1/jobs"
    tags = ["jobs"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_jobs(
        self,
        views: NamedDependency[Views],
        *,
        status: Filter = None,
        handler: Filter = None,
        queue: Filter = None,
        search: Annotated[str | None, QueryParameter(max_length=200, pattern=NO_NUL)] = None,
        source: Annotated[
            Literal["api", "code"] | None,
            QueryParameter(description='"code": the jobs `jobledger apply` manages; "api"'),
        ] = None,
        limit: Limit = 50,
        offset: Offset = 0,
        cursor: Cursor = None,
    ) -> Page:
        return views.jobs(
            status=status,
            handler=handler,
            queue=queue,
            search=search,
            source=source,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )

    @post("/", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def create_job(
        self,
        data: JSONBody[JobIn],
        idempotency_key: IdempotencyKey,
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> JobOut:
        definition = to_definition(data, jobs.job_id_of)
        job = jobs.schedule(definition, at=clock(), by=actor, key=idempotency_key)
        return job_out(job)

    @get("/{job_id:uuid}", opt=VIEWER, sync_to_thread=True)
    def get_job(
        self, job_id: FromPath[UUID], jobs: NamedDependency[Jobs], as_of: AsOf = None
    ) -> JobOut:
        if as_of is None:
            return job_out(jobs.get(job_id))
        if as_of.isascii() and as_of.isdigit():
            return job_out(jobs.get(job_id, version=_version(as_of)))
        moment = _parse_moment(as_of)
        return job_out(jobs.as_of(job_id, moment), as_of=moment)

    @patch("/{job_id:uuid}", opt=OPERATOR, sync_to_thread=True)
    def update_job(
        self,
        job_id: FromPath[UUID],
        data: JSONBody[JobPatch],
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        *,
        override: Override = False,
    ) -> JobOut:
        wanted = patched(from_definition(jobs.get(job_id).definition), data)
        changed = jobs.update(
            job_id, to_definition(wanted, jobs.job_id_of), at=clock(), by=actor, override=override
        )
        return job_out(changed)

    @delete("/{job_id:uuid}", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def delete_job(
        self,
        job_id: FromPath[UUID],
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        *,
        override: Override = False,
    ) -> JobOut:
        return job_out(jobs.delete(job_id, by=actor, override=override))

    @post("/{job_id:uuid}/pause", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def pause_job(
        self,
        job_id: FromPath[UUID],
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        data: JSONBody[ReasonIn | None] = None,
    ) -> JobOut:
        reason = data.reason if data is not None else ""
        return job_out(jobs.pause(job_id, by=actor, reason=reason))

    @post("/{job_id:uuid}/resume", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def resume_job(
        self,
        job_id: FromPath[UUID],
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> JobOut:
        return job_out(jobs.resume(job_id, at=clock(), by=actor))

    @post(
        "/{job_id:uuid}/trigger",
        opt=OPERATOR,
        sync_to_thread=True,
        status_code=HTTP_202_ACCEPTED,
        responses={200: ResponseSpec(ExecutionRef, description="a duplicate of a unique run")},
    )
    def trigger_job(
        self,
        job_id: FromPath[UUID],
        *,
        idempotency_key: IdempotencyKey,
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        run_budget: NamedDependency[RunBudget],
        queues: NamedDependency[Queues],
        data: JSONBody[TriggerIn | None] = None,
    ) -> Response[ExecutionRef]:
        """Run the job now; the same Idempotency-Key returns the first run. With
        ``unique``, a run holding the key answers 200 with ``duplicate: true``.
        ``warnings`` says if no live worker leases from the job's queue."""
        key = key_or_new(idempotency_key)
        run_budget.take(1)
        now = clock()
        if data is None or data.unique is None:
            execution = jobs.trigger(job_id, key=key, at=now, by=actor)
            return started_response(execution, queues, now)
        outcome = jobs.trigger_unique(job_id, to_unique(data.unique), key=key, at=now, by=actor)
        return outcome_response(outcome, queues, now)

    @get("/{job_id:uuid}/executions", opt=VIEWER, sync_to_thread=True)
    def job_executions(
        self,
        job_id: FromPath[UUID],
        views: NamedDependency[Views],
        *,
        status: Filter = None,
        limit: Limit = 50,
        offset: Offset = 0,
        cursor: Cursor = None,
    ) -> Page:
        return views.executions(
            job_id=job_id, status=status, limit=limit, offset=offset, cursor=cursor
        )

    @get("/{job_id:uuid}/events", opt=VIEWER, sync_to_thread=True)
    def job_events(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[UUID],
        jobs: NamedDependency[Jobs],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[EventOut]]:
        """The job's events in order, a page at a time: the ``Link`` header names the
        next."""
        return events_page(request, jobs.history(job_id), limit=limit, cursor=cursor)

    @get("/{job_id:uuid}/preview", opt=VIEWER, sync_to_thread=True)
    def job_preview(
        self,
        job_id: FromPath[UUID],
        jobs: NamedDependency[Jobs],
        clock: NamedDependency[Clock],
        count: Annotated[int, QueryParameter(ge=1, le=100)] = 10,
    ) -> PreviewOut:
        job = jobs.get(job_id)
        after = clock() - timedelta(microseconds=1)
        schedule = job.definition.schedule
        if job.definition.depends_on:
            schedule = jobs.occurrence_schedule(job)  # its upstreams' occurrences
        preview = preview_fires(schedule, after=after, count=count, job_id=job.id)
        if job.deleted:  # a deleted job never fires again
            preview.fires = []
        return preview

    # ---- dependencies and backfill --------------------------------------------------

    @get("/{job_id:uuid}/dependencies", opt=VIEWER, sync_to_thread=True)
    def job_dependencies(
        self, job_id: FromPath[UUID], jobs: NamedDependency[Jobs]
    ) -> DependenciesOut:
        """The jobs this one waits for, and those that wait for it."""
        job = jobs.get(job_id)
        waits = {d.job: d.on for d in job.definition.depends_on}
        upstreams = [_link(up, waits[up.id]) for up in jobs.upstreams(job_id)]
        downstreams = [
            _link(down, next(d.on for d in down.definition.depends_on if d.job == job_id))
            for down in jobs.downstreams(job_id)
        ]
        return DependenciesOut(upstreams=upstreams, downstreams=downstreams)

    @post("/{job_id:uuid}/backfill", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def backfill_job(
        self,
        job_id: FromPath[UUID],
        data: JSONBody[BackfillIn],
        *,
        jobs: NamedDependency[Jobs],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
        run_budget: NamedDependency[RunBudget],
    ) -> BackfillReport:
        """Fire the occurrences of ``[start, end]`` that never fired; ``dry_run`` only
        counts. A second backfill of the same window fires nothing."""
        return jobs.backfill(
            job_id,
            start=data.start,
            end=data.end,
            overlap=data.overlap,
            limit=data.max,
            reason=data.reason,
            dry_run=data.dry_run,
            at=clock(),
            by=actor,
            admit=run_budget.take,
        )


def _link(job: Job, on: WaitFor) -> JobLink:
    return JobLink(id=job.id, name=job.definition.name, status=job_status(job), on=on)


def _version(text: str) -> int:
    version = int(text)
    if not 1 <= version <= MAX_INT:
        raise ApiError(
            400,
            f"as_of: version {text} is out of range",
            field="as_of",
            fix="use a version from 1 up to the job's current version",
        )
    return version


def _parse_moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ApiError(
            400,
            f"as_of: {text!r} is neither a version number nor an ISO time with an offset",
            field="as_of",
            fix="use e.g. as_of=3 or as_of=2026-11-29T10:00:00Z",
        )
    return moment


@post(
    "/api/v1/jobs:apply", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK, tags=["jobs"]
)
def apply_jobs(
    data: JSONBody[ApplyIn],
    declared_jobs: NamedDependency[DeclaredJobs],
    actor: NamedDependency[Actor],
    clock: NamedDependency[Clock],
) -> ApplyOut:
    """Apply the whole set of jobs code declares in ``scope``, atomically: create,
    update or (with ``prune``) delete managed jobs of that scope until the log holds
    exactly the set; ``dry_run`` only answers the plan. A set the log holds already
    writes nothing."""
    return declared_jobs.apply(
        data.jobs,
        at=clock(),
        by=actor,
        prune=data.prune,
        dry_run=data.dry_run,
        scope=data.scope,
    )


@get("/api/v1/handlers", opt=VIEWER, sync_to_thread=False, tags=["jobs"])
def list_handlers(
    request: Request[Any, Any, Any],
    jobs: NamedDependency[Jobs],
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Response[list[HandlerOut]]:
    """The handlers the workers run, by name: what each does, and the JSON schema of
    the payload it declares (null: any JSON object). A page at a time: the ``Link``
    header names the next."""
    described = jobs.handlers.described()
    return linked(request, described, HANDLERS, limit=limit, cursor=cursor)


HANDLERS = Order[HandlerOut]("handlers", lambda handler: (handler.name,))
