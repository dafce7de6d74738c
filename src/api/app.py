"""The Litestar application: REST v1 under /api/v1, OpenAPI at /schema.

The OpenAPI document is served as JSON only (at /schema and /schema/openapi.json):
litestar's viewers load their scripts from CDNs, which would make the API's own
origin run code from elsewhere. Point any OpenAPI viewer at the JSON instead."""

from litestar import Litestar
from litestar.datastructures import State
from litestar.middleware.base import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.types import ControllerRouterHandler

from jobledger.api.auth import AuthController, TokenController, UserController
from jobledger.api.budgets import BudgetMiddleware, Gate, Limits, OverBudgetError, over_budget
from jobledger.api.dashboard import pages
from jobledger.api.dependencies import dependencies
from jobledger.api.errors import EXCEPTION_HANDLERS, document_closed_bodies, document_errors
from jobledger.api.executions import DeadLetterController, ExecutionController, run_batch
from jobledger.api.jobs import JobController, apply_jobs, list_handlers
from jobledger.api.limits import LimitController
from jobledger.api.metrics import MetricsMiddleware
from jobledger.api.notifications import NotificationController
from jobledger.api.openapi_links import add_links
from jobledger.api.queues import QueueController
from jobledger.api.schedules import preview_schedule
from jobledger.api.schemas import strict_bodies
from jobledger.api.security import (
    PUBLIC,
    SCHEMA_PATH,
    AuthMiddleware,
    no_sniffing,
    role_guard,
)
from jobledger.api.state import ApiPorts, ApiState
from jobledger.api.stream import stream_events
from jobledger.api.strictness import strict_request
from jobledger.api.system import SystemController, health, metrics, ready
from jobledger.api.workflows import WorkflowController
from jobledger.domain.clock import Clock, utc_now
from jobledger.services.application import Services

ROUTES: list[ControllerRouterHandler] = [
    AuthController,
    TokenController,
    UserController,
    JobController,
    ExecutionController,
    DeadLetterController,
    QueueController,
    LimitController,
    NotificationController,
    SystemController,
    WorkflowController,
    preview_schedule,
    health,
    ready,
    metrics,
    *pages.ROUTES,
    # Application code: its handlers, and the jobs it declares.
    list_handlers,
    apply_jobs,
    run_batch,
    stream_events,
]


def create_app(ports: ApiPorts, services: Services, *, now: Clock = utc_now) -> Litestar:
    """The app over ``services`` and its process's ``ports``; ``now`` is the clock every
    route reads."""
    state = ApiState(ports=ports, services=services, now=now)
    state.gate = Gate(ports.budgets, Limits.from_settings(ports.settings), state)
    auth = DefineMiddleware(
        AuthMiddleware, exclude_from_auth_key=PUBLIC, exclude=[f"^{SCHEMA_PATH}"]
    )
    counting = DefineMiddleware(MetricsMiddleware, metrics=ports.metrics)
    app = Litestar(
        route_handlers=ROUTES,
        dependencies=dependencies(services, now),
        middleware=[counting, BudgetMiddleware, auth],
        guards=[role_guard, strict_request],
        exception_handlers={**EXCEPTION_HANDLERS, OverBudgetError: over_budget},  # type: ignore[dict-item]
        openapi_config=OpenAPIConfig(
            title="jobledger",
            version="1",
            path=SCHEMA_PATH,
            description=__doc__,
            render_plugins=[JsonRenderPlugin(path=["/openapi.json", "/"])],
        ),
        before_send=[no_sniffing],
        request_max_body_size=ports.settings.api_max_body_bytes,
        state=State({"api": state}),
        template_config=pages.template_config(),
        logging_config=None,
        debug=False,
    )
    document_errors(app)
    document_closed_bodies(app, {kind.__name__ for kind in strict_bodies()})
    add_links(app)
    return app
