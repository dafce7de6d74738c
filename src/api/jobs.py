"""Jobs: define, change, pause, resume, trigger, delete; their history and past states."""

from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

import msgspec
from litestar import Controller, Request, delete, get, patch, post
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_202_ACCEPTED

from jobledger.api.common import (
    Filter,
    IdempotencyKey,
    Limit,
    Offset,
    check_handler,
    history_out,
    key_or_new,
    state_of,
)
from jobledger.api.errors import ApiError
from jobledger.api.schedules import preview_fires
from jobledger.api.schemas import (
    NO_NUL,
    EventOut,
    JobIn,
    JobOut,
    JobPatch,
    PreviewOut,
    ReasonIn,
    from_definition,
    job_out,
    patched,
    to_definition,
)
from jobledger.api.security import OPERATOR, VIEWER, actor
from jobledger.domain.job import Job
from jobledger.domain.json_values import MAX_INT
from jobledger.projections import read_queries
from jobledger.projections.read_queries import Page

AsOf = Annotated[
    str | None,
    QueryParameter(
        max_length=64,
        pattern=NO_NUL,
        description="the job as it was: an ISO 8601 time with offset, or a version number",
    ),
]


class ExecutionRef(msgspec.Struct):
    id: UUID
    status: str


class JobController(Controller):
    path = "/api/v1/jobs"
    tags = ["jobs"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_jobs(
        self,
        request: Request[Any, Any, Any],
        *,
        status: Filter = None,
        handler: Filter = None,
        queue: Filter = None,
        search: Annotated[str | None, QueryParameter(max_length=200, pattern=NO_NUL)] = None,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page:
        return read_queries.list_jobs(
            state_of(request).database,
            status=status,
            handler=handler,
            queue=queue,
            search=search,
            limit=limit,
            offset=offset,
        )

    @post("/", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def create_job(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[JobIn],
        idempotency_key: IdempotencyKey,
    ) -> JobOut:
        state = state_of(request)
        check_handler(state, data.handler)
        job = state.container.ledger.schedule_job(
            to_definition(data), at=state.now(), by=actor(request), key=idempotency_key
        )
        return job_out(job)

    @get("/{job_id:uuid}", opt=VIEWER, sync_to_thread=True)
    def get_job(
        self, request: Request[Any, Any, Any], job_id: FromPath[UUID], as_of: AsOf = None
    ) -> JobOut:
        ledger = state_of(request).container.ledger
        if as_of is None:
            return job_out(ledger.get_job(job_id))
        if as_of.isascii() and as_of.isdigit():
            return job_out(ledger.get_job(job_id, version=_version(as_of)))
        moment = _parse_moment(as_of)
        return job_out(ledger.job_as_of(job_id, moment), as_of=moment)

    @patch("/{job_id:uuid}", opt=OPERATOR, sync_to_thread=True)
    def update_job(
        self, request: Request[Any, Any, Any], job_id: FromPath[UUID], data: JSONBody[JobPatch]
    ) -> JobOut:
        state = state_of(request)
        ledger = state.container.ledger
        current = from_definition(ledger.get_job(job_id).definition)
        wanted = patched(current, data)
        check_handler(state, wanted.handler)
        job = ledger.update_job(job_id, to_definition(wanted), at=state.now(), by=actor(request))
        return job_out(job)

    @delete("/{job_id:uuid}", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def delete_job(self, request: Request[Any, Any, Any], job_id: FromPath[UUID]) -> JobOut:
        ledger = state_of(request).container.ledger
        return job_out(ledger.delete_job(job_id, by=actor(request)))

    @post("/{job_id:uuid}/pause", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def pause_job(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[UUID],
        data: JSONBody[ReasonIn | None] = None,
    ) -> JobOut:
        ledger = state_of(request).container.ledger
        reason = data.reason if data is not None else ""
        return job_out(ledger.pause_job(job_id, by=actor(request), reason=reason))

    @post("/{job_id:uuid}/resume", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_200_OK)
    def resume_job(self, request: Request[Any, Any, Any], job_id: FromPath[UUID]) -> JobOut:
        state = state_of(request)
        job = state.container.ledger.resume_job(job_id, at=state.now(), by=actor(request))
        return job_out(job)

    @post(
        "/{job_id:uuid}/trigger", opt=OPERATOR, sync_to_thread=True, status_code=HTTP_202_ACCEPTED
    )
    def trigger_job(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[UUID],
        idempotency_key: IdempotencyKey,
    ) -> ExecutionRef:
        state = state_of(request)
        execution = state.container.ledger.trigger_job(
            job_id, key=key_or_new(idempotency_key), at=state.now(), by=actor(request)
        )
        return ExecutionRef(execution.id, str(execution.status))

    @get("/{job_id:uuid}/executions", opt=VIEWER, sync_to_thread=True)
    def job_executions(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[UUID],
        status: Filter = None,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Page:
        return read_queries.list_executions(
            state_of(request).database, job_id=job_id, status=status, limit=limit, offset=offset
        )

    @get("/{job_id:uuid}/events", opt=VIEWER, sync_to_thread=True)
    def job_events(self, request: Request[Any, Any, Any], job_id: FromPath[UUID]) -> list[EventOut]:
        return history_out(state_of(request).container.ledger, Job, job_id)

    @get("/{job_id:uuid}/preview", opt=VIEWER, sync_to_thread=True)
    def job_preview(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[UUID],
        count: Annotated[int, QueryParameter(ge=1, le=100)] = 10,
    ) -> PreviewOut:
        state = state_of(request)
        job = state.container.ledger.get_job(job_id)
        after = state.now() - timedelta(microseconds=1)
        return preview_fires(job.definition.schedule, after=after, count=count)


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
