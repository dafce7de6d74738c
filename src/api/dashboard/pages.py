"""The dashboard's page routes under /ui, its templates and its static files.

Every page is a GET that needs a session (or a token) with at least the viewer role;
pages that only serve a change (the job forms) need the operator role, like the
changes themselves. The server decides before anything is drawn: a signed-in browser
gets the page, one without a valid session a 303 to the login page.
"""

import hashlib
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode
from uuid import UUID

import msgspec
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from litestar import Request, Response, Router, get
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar.status_codes import HTTP_303_SEE_OTHER
from litestar.template.config import TemplateConfig
from litestar.types import ControllerRouterHandler

from jobledger.api.dashboard import charts, dag, presenters
from jobledger.api.dashboard.access import DASHBOARD, EXCEPTION_HANDLERS, safe_next
from jobledger.api.schedules import preview_fires
from jobledger.api.schemas import NO_NUL, CronIn, Fire, JobIn, job_out, workflow_out
from jobledger.api.security import (
    OPEN,
    OPERATOR,
    SESSION_COOKIE,
    VIEWER,
    SessionAuth,
    api_state,
    principal_of,
)
from jobledger.api.system import parse_types
from jobledger.domain.clock import Clock
from jobledger.domain.errors import (
    DomainError,
    InvalidDefinitionError,
    NotFoundError,
    UndecodableEventError,
)
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.job import Job
from jobledger.domain.limits import Limit
from jobledger.domain.notifications import ChannelKind, NotificationRules, NotifyOn
from jobledger.domain.queue import Queue
from jobledger.domain.roles import Role
from jobledger.domain.schedules import ManualSchedule, Schedule
from jobledger.domain.topics import event_topics
from jobledger.domain.workflow import Workflow, WorkflowStatus
from jobledger.schemas.notifications import NotificationRuleOut
from jobledger.services.accounts import AccountService
from jobledger.services.actors import Actor
from jobledger.services.admin import Admin
from jobledger.services.executions import Executions
from jobledger.services.jobs import Jobs
from jobledger.services.limits import Limits
from jobledger.services.notifications import Notifications
from jobledger.services.queues import Queues
from jobledger.services.system import System
from jobledger.services.views import JOB_STATUSES, Page, Views
from jobledger.services.workflows import Workflows

HERE = Path(__file__).parent
PAGE_SIZE = 50
_NEXT_FIRES = 5
_RECENT = 10
_AUDIT_WINDOW = 50

Text = Annotated[str | None, QueryParameter(max_length=200, pattern=NO_NUL)]
PageNumber = Annotated[int, QueryParameter(ge=1, le=100_000, description="page, from 1")]
# Pages hold a CSRF token and operational data: never cached, never framed.
_HEADERS = [
    ResponseHeader(name="Cache-Control", value="no-store"),
    ResponseHeader(name="X-Frame-Options", value="DENY"),
    ResponseHeader(name="Referrer-Policy", value="same-origin"),
    ResponseHeader(
        name="Content-Security-Policy",
        value="default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'self'",
    ),
]


def _asset_version() -> str:
    """A hash of the static files: their URLs carry it, so a browser that cached them
    for an hour still loads the new ones right after an upgrade."""
    digest = hashlib.sha256()
    for path in sorted((HERE / "static").iterdir()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


ASSET_VERSION = _asset_version()


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(presenters.FILTERS)
    environment.globals["asset_version"] = ASSET_VERSION
    environment.globals["stream_types"] = " ".join(STREAM_TYPES)
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))


# The event types a page listens for on the log's stream (an EventSource hears a named
# event only through a listener of its name): those of what the pages show.
STREAM_TYPES = tuple(
    topic.partition(":")[2]
    for aggregate in (Execution, Job, Queue, Workflow, Limit, NotificationRules)
    for topic in event_topics(aggregate, followed_only=False)
)


def render(request: Request[Any, Any, Any], template: str, **context: Any) -> Template:  # noqa: ANN401 (template values)
    """A page with what every page needs: who is signed in, their rights, the CSRF
    token for the API calls the page makes, and the clock."""
    principal = principal_of(request)
    auth = request.auth
    return Template(
        template_name=template,
        context={
            "me": principal,
            "csrf": auth.csrf_token if isinstance(auth, SessionAuth) else "",
            "can_operate": principal.role.includes(Role.OPERATOR),
            "is_admin": principal.role.includes(Role.ADMIN),
            "now": api_state(request).now(),
            "path": request.url.path,
            **context,
        },
    )


def pager(request: Request[Any, Any, Any], page: Page) -> dict[str, Any]:
    """Links to the previous and next page that keep the other query parameters."""
    number = page.offset // page.limit + 1
    last = max(1, -(-page.total // page.limit))

    def link(to: int) -> str:
        query = {k: v for k, v in request.query_params.items() if k != "page" and v}
        query["page"] = str(to)
        return f"{request.url.path}?{urlencode(query)}"

    return {
        "number": number,
        "last": last,
        "total": page.total,
        "prev": link(number - 1) if number > 1 else None,
        "next": link(number + 1) if number < last else None,
    }


def _offset(page: int) -> int:
    return (page - 1) * PAGE_SIZE


def _chosen(filters: dict[str, str | None]) -> dict[str, Any]:
    """The filters a list query takes: an empty field filters nothing."""
    return {name: value or None for name, value in filters.items()}


def _listing(
    request: Request[Any, Any, Any],
    template: str,
    found: Page,
    filters: dict[str, str | None],
    jobs: Jobs,
    **context: Any,  # noqa: ANN401 (template values)
) -> Template:
    """A list page: its rows (``items``), the pager, the filters as typed, and the
    handlers to filter by."""
    return render(
        request,
        template,
        items=found.items,
        pager=pager(request, found),
        filters={k: v or "" for k, v in filters.items()},
        handlers=jobs.handlers.listed(),
        **context,
    )


# ---- sign-in ---------------------------------------------------------------------------


@get("/login", opt=OPEN, sync_to_thread=True, name="ui-login")
def login(
    request: Request[Any, Any, Any],
    accounts: NamedDependency[AccountService],
    clock: NamedDependency[Clock],
    target: Annotated[str | None, QueryParameter(name="next", max_length=2000)] = None,
    expired: Annotated[str | None, QueryParameter(max_length=10)] = None,
) -> Response[Any]:
    """The sign-in form; a browser that is signed in already goes straight on."""
    destination = safe_next(target)
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie and accounts.session(cookie, at=clock()) is not None:
        return Redirect(destination, status_code=HTTP_303_SEE_OTHER)
    return Template(
        template_name="login.html",
        context={"next": destination, "expired": bool(expired and cookie is not None)},
    )


# ---- overview ----------------------------------------------------------------------------


@get("/", opt=VIEWER, sync_to_thread=True, name="ui-overview")
def overview(
    request: Request[Any, Any, Any], system: NamedDependency[System], clock: NamedDependency[Clock]
) -> Template:
    view = system.view(at=clock())
    return render(
        request,
        "overview.html",
        view=view,
        cards=presenters.cards(view),
        charts=charts.overview_charts(view.minutes),
    )


# ---- jobs --------------------------------------------------------------------------------


@get("/jobs", opt=VIEWER, sync_to_thread=True, name="ui-jobs")
def jobs_page(
    request: Request[Any, Any, Any],
    views: NamedDependency[Views],
    jobs: NamedDependency[Jobs],
    *,
    status: Text = None,
    handler: Text = None,
    queue: Text = None,
    search: Text = None,
    page: PageNumber = 1,
) -> Template:
    filters = {"status": status, "handler": handler, "queue": queue, "search": search}
    found = views.jobs(**_chosen(filters), limit=PAGE_SIZE, offset=_offset(page))
    strips = views.recent_runs([job.id for job in found.items], per_job=LISTED_STRIP_RUNS)
    return _listing(
        request, "jobs.html", found, filters, jobs, statuses=JOB_STATUSES, strips=strips
    )


@get("/jobs/new", opt=OPERATOR, sync_to_thread=False, name="ui-job-new")
def new_job(request: Request[Any, Any, Any], jobs: NamedDependency[Jobs]) -> Template:
    blank = JobIn(name="", handler="test.echo", schedule=CronIn(cron="0 * * * *"))
    return _job_form(request, jobs, blank, job_id=None, managed_key=None)


@get("/jobs/{job_id:uuid}/edit", opt=OPERATOR, sync_to_thread=True, name="ui-job-edit")
def edit_job(
    request: Request[Any, Any, Any], job_id: FromPath[UUID], jobs: NamedDependency[Jobs]
) -> Template:
    job = job_out(jobs.get(job_id))
    return _job_form(request, jobs, job.definition, job_id=job_id, managed_key=job.key)


def _job_form(
    request: Request[Any, Any, Any],
    jobs: Jobs,
    definition: JobIn,
    *,
    job_id: UUID | None,
    managed_key: str | None,
) -> Template:
    return render(
        request,
        "job_form.html",
        job_id=job_id,
        managed_key=managed_key,
        form=msgspec.to_builtins(definition),
        payload_hints=presenters.payload_hints(jobs.handlers.described()),
        **presenters.form_choices(jobs.handlers.listed()),
    )


@get("/jobs/{job_id:uuid}", opt=VIEWER, sync_to_thread=True, name="ui-job")
def job_detail(
    request: Request[Any, Any, Any],
    job_id: FromPath[UUID],
    jobs: NamedDependency[Jobs],
    views: NamedDependency[Views],
    clock: NamedDependency[Clock],
) -> Template:
    domain_job = jobs.get(job_id)
    job = job_out(domain_job)
    events = jobs.history(job_id)
    return render(
        request,
        "job.html",
        job=job,
        definition=msgspec.to_builtins(job.definition),
        fires=_next_fires(domain_job, clock(), active=job.status == "active"),
        upstreams=jobs.upstreams(job_id),
        downstreams=jobs.downstreams(job_id),
        waits={str(d.job): str(d.on) for d in domain_job.definition.depends_on},
        backfillable=_backfillable(jobs, domain_job),
        executions=views.executions(job_id=job_id, limit=_RECENT),
        strip=views.recent_runs([job_id], per_job=STRIP_RUNS).get(job_id, []),
        timeline=presenters.timeline(events),
        event_count=len(events),
        versions=presenters.versions(events),
    )


def _next_fires(job: Job, now: datetime, *, active: bool) -> list[Fire]:
    schedule: Schedule = job.definition.schedule
    if not active or isinstance(schedule, ManualSchedule):
        return []
    return preview_fires(schedule, after=now, count=_NEXT_FIRES, job_id=job.id).fires


def _backfillable(jobs: Jobs, job: Job) -> bool:
    """Whether the job has occurrences a backfill could fill (its own schedule's, or
    its upstreams')."""
    try:
        jobs.occurrence_schedule(job)
    except InvalidDefinitionError:
        return False
    return not job.deleted


# ---- workflows -----------------------------------------------------------------------


@get("/workflows", opt=VIEWER, sync_to_thread=True, name="ui-workflows")
def workflows_page(
    request: Request[Any, Any, Any],
    views: NamedDependency[Views],
    *,
    status: Text = None,
    name: Text = None,
    page: PageNumber = 1,
) -> Template:
    """The workflows, the latest started first, each with its steps counted by state."""
    filters = {"status": status, "name": name}
    found = views.workflows(**_chosen(filters), limit=PAGE_SIZE, offset=_offset(page))
    return render(
        request,
        "workflows.html",
        items=found.items,
        pager=pager(request, found),
        filters={k: v or "" for k, v in filters.items()},
        statuses=[s.value for s in WorkflowStatus],
    )


@get("/workflows/{workflow_id:uuid}", opt=VIEWER, sync_to_thread=True, name="ui-workflow")
def workflow_detail(
    request: Request[Any, Any, Any],
    workflow_id: FromPath[UUID],
    workflows: NamedDependency[Workflows],
) -> Template:
    """A workflow's DAG, drawn on the server, with each step's state and run."""
    workflow = workflows.get(workflow_id)
    states = {name: str(state) for name, state in workflow.states.items()}
    after = {name: list(spec.after) for name, spec in workflow.steps.items()}
    events = workflows.history(workflow_id)
    return render(
        request,
        "workflow.html",
        workflow=workflow_out(workflow),
        dag=dag.layout(after, states),
        counts=Counter(states.values()),
        timeline=presenters.timeline(events),
        event_count=len(events),
    )


# ---- executions --------------------------------------------------------------------------


@get("/executions", opt=VIEWER, sync_to_thread=True, name="ui-executions")
def executions_page(
    request: Request[Any, Any, Any],
    views: NamedDependency[Views],
    jobs: NamedDependency[Jobs],
    *,
    status: Text = None,
    job_id: Text = None,
    handler: Text = None,
    queue: Text = None,
    since: Text = None,
    until: Text = None,
    search: Text = None,
    page: PageNumber = 1,
) -> Template:
    filters = {"status": status, "job_id": job_id, "handler": handler, "queue": queue}
    filters |= {"since": since, "until": until, "search": search}
    problems: dict[str, str] = {}
    query = _execution_query(filters, problems)
    found = views.executions(**query, limit=PAGE_SIZE, offset=_offset(page))
    statuses = [s.value for s in ExecutionStatus]
    return _listing(
        request,
        "executions.html",
        found,
        filters,
        jobs,
        problems=problems,
        statuses=statuses,
        bulk_filter=_bulk_filter(query),
    )


def _bulk_filter(query: dict[str, Any]) -> dict[str, str]:
    """The list's filter as a bulk action's body takes it (times with their zone)."""
    return {
        name: value.isoformat() if isinstance(value, datetime) else str(value)
        for name, value in query.items()
        if value is not None
    }


def _execution_query(filters: dict[str, str | None], problems: dict[str, str]) -> dict[str, Any]:
    """The list's filters; a value that does not parse is reported and left out."""
    query: dict[str, Any] = {
        k: filters[k] or None for k in ("status", "handler", "queue", "search")
    }
    parsers = {
        "job_id": presenters.parse_uuid,
        "since": presenters.parse_time,
        "until": presenters.parse_time,
    }
    for name, parse in parsers.items():
        try:
            query[name] = parse(filters[name])
        except ValueError:
            problems[name] = f"{filters[name]!r} is not a valid {name.replace('_', ' ')}"
            query[name] = None
    return query


@get("/search", opt=VIEWER, sync_to_thread=True, name="ui-search")
def search_page(
    views: NamedDependency[Views],
    jobs: NamedDependency[Jobs],
    *,
    q: Text = None,
) -> Redirect:
    """The header's search: a whole run's or job's id opens its page; anything else
    lists the runs it finds (ADR 107)."""
    text = (q or "").strip()
    try:
        wanted = UUID(text)
    except ValueError:
        return Redirect(
            f"/ui/executions?{urlencode({'search': text})}" if text else "/ui/executions"
        )
    if views.execution(wanted) is not None:
        return Redirect(f"/ui/executions/{wanted}")
    try:
        jobs.get(wanted)
    except NotFoundError:
        return Redirect(f"/ui/executions?{urlencode({'search': text})}")
    return Redirect(f"/ui/jobs/{wanted}")


@get("/executions/{execution_id:uuid}", opt=VIEWER, sync_to_thread=True, name="ui-execution")
def execution_detail(
    request: Request[Any, Any, Any],
    execution_id: FromPath[UUID],
    executions: NamedDependency[Executions],
    views: NamedDependency[Views],
) -> Template:
    events = executions.history(execution_id)  # the 404 page for an unknown id
    row = views.execution(execution_id)
    run = _run_of(executions, execution_id)
    record = views.run_record(execution_id)
    # The handler's lines have a section of their own, not a row each in the timeline.
    shown = [e for e in events if e.type != LOGGED]
    return render(
        request,
        "execution.html",
        execution_id=execution_id,
        execution=row,
        step=_step_of(run),
        limits=presenters.run_limits(run.spec.limits) if run else "",
        record=record,
        attempts=views.attempts(execution_id) if row else [],
        timeline=presenters.timeline(shown),
        event_count=len(shown),
    )


LOGGED = "ExecutionLogged"


def _run_of(executions: Executions, execution_id: UUID) -> Execution | None:
    try:
        return executions.get(execution_id)
    except DomainError:
        return None  # shown from its history alone (e.g. an event that no longer decodes)


def _step_of(run: Execution | None) -> tuple[UUID, str] | None:
    """(its workflow, its step name) for a workflow step's run."""
    if run is None or run.workflow_id is None or run.step is None:
        return None
    return run.workflow_id, run.step


# ---- workers, dead letters, system, audit ----------------------------------------------


@get("/workers", opt=VIEWER, sync_to_thread=True, name="ui-workers")
def workers(
    request: Request[Any, Any, Any], system: NamedDependency[System], clock: NamedDependency[Clock]
) -> Template:
    now = clock()
    live = system.live_workers(at=now)
    return render(
        request,
        "workers.html",
        workers=sorted(live, key=lambda w: w.worker_id),
        progress=system.live_progress([run for w in live for run in w.running], at=now),
    )


_GROUPS = 10  # the largest groups of dead letters the page shows above the list
STRIP_RUNS = 24  # the latest runs a job's history strip shows, one cell each
LISTED_STRIP_RUNS = 12  # on the jobs list, where every row has one


@get("/dlq", opt=VIEWER, sync_to_thread=True, name="ui-dlq")
def dead_letters_page(
    request: Request[Any, Any, Any],
    views: NamedDependency[Views],
    jobs: NamedDependency[Jobs],
    *,
    queue: Text = None,
    handler: Text = None,
    error_contains: Text = None,
    search: Text = None,
    page: PageNumber = 1,
) -> Template:
    filters = {"queue": queue, "handler": handler, "error_contains": error_contains}
    filters["search"] = search
    found = views.dead_letters(**_chosen(filters), limit=PAGE_SIZE, offset=_offset(page))
    groups = views.dead_letter_groups(limit=_GROUPS)
    return _listing(request, "dlq.html", found, filters, jobs, groups=groups)


@get("/system", opt=VIEWER, sync_to_thread=True, name="ui-system")
def system_page(
    request: Request[Any, Any, Any],
    *,
    system: NamedDependency[System],
    admin: NamedDependency[Admin],
    queues: NamedDependency[Queues],
    actor: NamedDependency[Actor],
    clock: NamedDependency[Clock],
) -> Template:
    now = clock()
    return render(
        request,
        "system.html",
        view=system.view(at=now),
        queues=queues.overview(at=now, by=actor),
        breakers=system.breaker_states(),
        rebuild=admin.rebuild_task,
    )


@get("/limits", opt=VIEWER, sync_to_thread=True, name="ui-limits")
def limits_page(
    request: Request[Any, Any, Any],
    *,
    limits: NamedDependency[Limits],
    actor: NamedDependency[Actor],
    clock: NamedDependency[Clock],
) -> Template:
    """The named limits and every key in use or waited for, from the use case the
    API's GET /api/v1/limits answers with; operators also get the form that creates
    or changes a named limit."""
    return render(request, "limits.html", overview=limits.overview(at=clock(), by=actor))


@get("/notifications", opt=VIEWER, sync_to_thread=True, name="ui-notifications")
def notifications_page(
    request: Request[Any, Any, Any],
    *,
    notifications: NamedDependency[Notifications],
    actor: NamedDependency[Actor],
) -> Template:
    """The notification rules and the latest notifications sent, from the use cases
    the API's GET /api/v1/notifications/rules and GET /api/v1/notifications answer
    with; admins also get each rule's Send test and Delete, and the form that makes or
    replaces a rule."""
    rules, unreadable = _rules_of(notifications, actor)
    return render(
        request,
        "notifications.html",
        rules=rules,
        unreadable=unreadable,
        sent=notifications.sent(by=actor, limit=PAGE_SIZE).notifications,
        conditions=[on.value for on in NotifyOn],
        channels=[kind.value for kind in ChannelKind],
    )


def _rules_of(
    notifications: Notifications, actor: Actor
) -> tuple[list[NotificationRuleOut], str | None]:
    """The rules, and why none are shown when their stored events no longer decode (the
    notifications sent are shown all the same)."""
    try:
        return notifications.rules(by=actor).rules, None
    except UndecodableEventError as error:
        return [], str(error)


@get("/audit", opt=VIEWER, sync_to_thread=True, name="ui-audit")
def audit(
    request: Request[Any, Any, Any],
    system: NamedDependency[System],
    *,
    after: Annotated[int | None, QueryParameter(ge=0, description="log position")] = None,
    types: Annotated[str | None, QueryParameter(max_length=2000, pattern=NO_NUL)] = None,
) -> Template:
    head = system.head()
    start = max(0, head - _AUDIT_WINDOW) if after is None else after
    wanted = parse_types(types)
    found = system.audit_page(after=start, types=wanted, since=None, until=None, limit=100)
    return render(
        request,
        "audit.html",
        events=[(e, presenters.cause_of(e)) for e in found.items],
        types=types or "",
        earlier=max(0, start - _AUDIT_WINDOW) if start > 0 else None,
        later=found.next_after if found.next_after < head else None,
        head=head,
    )


PAGES = Router(
    path=DASHBOARD,
    route_handlers=[
        login,
        overview,
        jobs_page,
        new_job,
        edit_job,
        job_detail,
        workflows_page,
        search_page,
        workflow_detail,
        executions_page,
        execution_detail,
        workers,
        dead_letters_page,
        system_page,
        limits_page,
        notifications_page,
        audit,
    ],
    exception_handlers=EXCEPTION_HANDLERS,
    response_headers=_HEADERS,
    include_in_schema=False,
)
STATIC = create_static_files_router(
    path=f"{DASHBOARD}/static",
    directories=[HERE / "static"],
    opt=OPEN,
    name="ui-static",
    include_in_schema=False,
    cache_control=CacheControlHeader(max_age=3600),
)
ROUTES: list[ControllerRouterHandler] = [PAGES, STATIC]
