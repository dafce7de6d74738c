"""Links in the OpenAPI document: which answer feeds which next request.

A link says, for one response, which value of it (``$response.body#/id``) fills a
parameter of another operation. Clients and schema-driven tests follow them to run
the workflows of the API: create a job, trigger it, cancel the run; list the dead
letters and requeue or discard one; start a workflow (or list them), read it, cancel
it; pause a queue, then drain or resume it. Litestar cannot declare links on a route, so
they are added to the generated document, by method and path: a route renamed or
removed makes ``add_links`` raise instead of leaving a link to nowhere.
"""

from typing import Final, NamedTuple

from litestar import Litestar
from litestar.openapi.spec import Link, OpenAPI, OpenAPIResponse, Operation


class Step(NamedTuple):
    """From the ``status`` answer of ``source`` to ``target``, with parameter values."""

    source: str  # "METHOD /path"
    status: str
    target: str
    parameters: dict[str, str]


_JOB = {"job_id": "$response.body#/id"}
_EXECUTION = {"execution_id": "$response.body#/id"}
_FIRST_EXECUTION = {"execution_id": "$response.body#/items/0/id"}
_SAME_EXECUTION = {"execution_id": "$request.path.execution_id"}
_FIRST_JOB = {"job_id": "$response.body#/items/0/id"}
_WORKFLOW = {"workflow_id": "$response.body#/id"}
_SAME_WORKFLOW = {"workflow_id": "$request.path.workflow_id"}
_FIRST_WORKFLOW = {"workflow_id": "$response.body#/items/0/id"}
_FIRST_STEP = {"execution_id": "$response.body#/steps/0/execution_id"}
_FIRST_QUEUE = {"name": "$response.body#/queues/0/name"}
_SAME_QUEUE = {"name": "$request.path.name"}

STEPS: Final = (
    Step("POST /api/v1/jobs", "201", "POST /api/v1/jobs/{job_id}/trigger", _JOB),
    Step("POST /api/v1/jobs", "201", "POST /api/v1/jobs/{job_id}/pause", _JOB),
    Step("POST /api/v1/jobs", "201", "DELETE /api/v1/jobs/{job_id}", _JOB),
    Step("GET /api/v1/jobs", "200", "POST /api/v1/jobs/{job_id}/trigger", _FIRST_JOB),
    Step("POST /api/v1/jobs/{job_id}/pause", "200", "POST /api/v1/jobs/{job_id}/trigger", _JOB),
    Step(
        "POST /api/v1/jobs/{job_id}/trigger",
        "202",
        "POST /api/v1/executions/{execution_id}/cancel",
        _EXECUTION,
    ),
    Step(
        "POST /api/v1/executions",
        "202",
        "POST /api/v1/executions/{execution_id}/cancel",
        _EXECUTION,
    ),
    Step(
        "GET /api/v1/executions",
        "200",
        "POST /api/v1/executions/{execution_id}/cancel",
        _FIRST_EXECUTION,
    ),
    Step(
        "POST /api/v1/executions/{execution_id}/cancel",
        "200",
        "POST /api/v1/dlq/{execution_id}/requeue",
        _EXECUTION,
    ),
    Step("GET /api/v1/dlq", "200", "POST /api/v1/dlq/{execution_id}/requeue", _FIRST_EXECUTION),
    Step("GET /api/v1/dlq", "200", "DELETE /api/v1/dlq/{execution_id}", _FIRST_EXECUTION),
    Step(
        "POST /api/v1/dlq/{execution_id}/requeue",
        "200",
        "POST /api/v1/executions/{execution_id}/cancel",
        _SAME_EXECUTION,
    ),
    Step(
        "POST /api/v1/dlq/{execution_id}/requeue",
        "200",
        "POST /api/v1/dlq/{execution_id}/requeue",
        _SAME_EXECUTION,
    ),
    # Dependencies, backfill and workflows.
    Step("POST /api/v1/jobs", "201", "GET /api/v1/jobs/{job_id}/dependencies", _JOB),
    Step("POST /api/v1/jobs", "201", "POST /api/v1/jobs/{job_id}/backfill", _JOB),
    Step("POST /api/v1/workflows", "201", "GET /api/v1/workflows/{workflow_id}", _WORKFLOW),
    Step("GET /api/v1/workflows", "200", "GET /api/v1/workflows/{workflow_id}", _FIRST_WORKFLOW),
    Step("POST /api/v1/workflows", "201", "POST /api/v1/workflows/{workflow_id}/cancel", _WORKFLOW),
    Step(
        "POST /api/v1/workflows",
        "201",
        "POST /api/v1/executions/{execution_id}/cancel",
        _FIRST_STEP,
    ),
    Step(
        "POST /api/v1/workflows/{workflow_id}/cancel",
        "200",
        "GET /api/v1/workflows/{workflow_id}/events",
        _SAME_WORKFLOW,
    ),
    # Queues: pause one of the list, then drain or resume it.
    Step("GET /api/v1/queues", "200", "POST /api/v1/queues/{name}/pause", _FIRST_QUEUE),
    Step(
        "POST /api/v1/queues/{name}/pause", "200", "POST /api/v1/queues/{name}/drain", _SAME_QUEUE
    ),
    Step(
        "POST /api/v1/queues/{name}/pause", "200", "POST /api/v1/queues/{name}/resume", _SAME_QUEUE
    ),
)


def add_links(app: Litestar) -> None:
    """Add ``STEPS`` to the app's OpenAPI document, each named after its target."""
    document = app.openapi_schema
    for step in STEPS:
        target = _operation(document, step.target)
        response = _response(_operation(document, step.source), step.source, step.status)
        links = response.links = dict(response.links or {})
        links[target.operation_id or step.target] = Link(
            operation_id=target.operation_id, parameters=dict(step.parameters)
        )


def _operation(document: OpenAPI, route: str) -> Operation:
    method, _, path = route.partition(" ")
    operation: Operation | None = getattr((document.paths or {}).get(path), method.lower(), None)
    if operation is None:
        raise LookupError(f"the OpenAPI document has no operation {route}")
    return operation


def _response(operation: Operation, route: str, status: str) -> OpenAPIResponse:
    answers = {
        code: answer
        for code, answer in (operation.responses or {}).items()
        if isinstance(answer, OpenAPIResponse)
    }
    if status not in answers:
        raise LookupError(f"the OpenAPI document has no {status} answer for {route}")
    return answers[status]
