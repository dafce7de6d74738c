"""What the client raises: one exception per kind of refusal, each with the API's own
message, the field it names and the fix it suggests."""

import msgspec

from jobledger.schemas.rows import ExecutionRow
from jobledger.schemas.system import ErrorBody
from jobledger.schemas.workflows import WorkflowOut


class JobledgerError(Exception):
    """A request jobledger refused or could not answer. ``status`` is the HTTP status
    (None when no answer came), ``code`` the API's error code."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.fix = fix
        super().__init__(f"{message}; {fix}" if fix else message)


class BadRequestError(JobledgerError):
    """400: a wrong type, an unknown field, a bad query value."""


class AuthenticationError(JobledgerError):
    """401: no token, or one that is unknown, revoked or expired."""


class PermissionDeniedError(JobledgerError):
    """403: the token's role lacks this right."""


class NotFoundError(JobledgerError):
    """404: nothing with that id."""


class NotVisibleYetError(NotFoundError):
    """404: in the log, but not in the lists yet (the read models trail the log by a
    moment); asking again shortly finds it."""


class ConflictError(JobledgerError):
    """409: not allowed in the current state, clashed with another change, or a job
    that code manages changed by hand without the override."""


class ValidationError(JobledgerError):
    """422: a definition or payload breaks a rule; ``field`` names where."""


class TooManyRequestsError(JobledgerError):
    """429: too many failed logins."""


class UnavailableError(JobledgerError):
    """503: a store jobledger needs is unreachable; the client retried and gave up."""


class ServerError(JobledgerError):
    """500 or another status the API does not document."""


class ConnectionFailedError(JobledgerError):
    """No answer: the server could not be reached, or the connection broke."""


class ExecutionFailedError(JobledgerError):
    """The awaited run was dead-lettered: every attempt failed. ``execution`` is the
    run as it ended; ``last_error`` its last attempt's error."""

    def __init__(self, execution: ExecutionRow) -> None:
        self.execution = execution
        self.last_error = execution.last_error
        super().__init__(
            f"execution {execution.id} ({execution.handler}) failed after "
            f"{execution.attempt} attempts: {execution.last_error}",
            code="dead_lettered",
            fix="see its attempts (client.get_execution), fix the cause and requeue it",
        )


class ExecutionCancelledError(JobledgerError):
    """The awaited run was cancelled, discarded from the dead-letter queue, or skipped
    (it never ran: a run it depended on failed)."""

    def __init__(self, execution: ExecutionRow) -> None:
        self.execution = execution
        who = f" by {execution.closed_by}" if execution.closed_by else ""
        why = f": {execution.closed_reason}" if execution.closed_reason else ""
        super().__init__(
            f"execution {execution.id} was {execution.status}{who}{why}", code=execution.status
        )


class WaitTimedOutError(JobledgerError):
    """The run did not finish within the wait; ``execution`` is how it was last seen
    (None if the lists did not show it yet). It goes on: wait again, or cancel it."""

    def __init__(
        self, execution_id: object, seconds: float, execution: ExecutionRow | None
    ) -> None:
        self.execution = execution
        state = execution.status if execution is not None else "not listed yet"
        super().__init__(
            f"execution {execution_id} did not finish within {seconds:g} s ({state})",
            code="timeout",
            fix="wait again with a longer timeout, or cancel it",
        )


class WorkflowFailedError(JobledgerError):
    """The awaited workflow failed (a step's run failed), or was cancelled; ``workflow``
    is how it ended, ``failed_steps`` the names of the steps that failed."""

    def __init__(self, workflow: WorkflowOut) -> None:
        self.workflow = workflow
        failed = [step for step in workflow.steps if step.status == "failed"]
        self.failed_steps = [step.name for step in failed]
        errors = "; ".join(f"{step.name}: {step.error}" for step in failed)
        super().__init__(
            f"workflow {workflow.id} ({workflow.name}) {workflow.status}"
            + (f": {errors}" if errors else ""),
            code=workflow.status,
            fix="see its steps (client.workflows.get) and their runs",
        )


class WorkflowTimedOutError(JobledgerError):
    """The workflow did not end within the wait; ``workflow`` is how it was last seen.
    It goes on: wait again, or cancel it."""

    def __init__(self, workflow_id: object, seconds: float, workflow: WorkflowOut) -> None:
        self.workflow = workflow
        done = sum(step.status == "completed" for step in workflow.steps)
        super().__init__(
            f"workflow {workflow_id} did not end within {seconds:g} s "
            f"({done} of {len(workflow.steps)} steps completed)",
            code="timeout",
            fix="wait again with a longer timeout, or cancel it",
        )


_BY_STATUS: dict[int, type[JobledgerError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: BadRequestError,
    415: BadRequestError,
    422: ValidationError,
    429: TooManyRequestsError,
    503: UnavailableError,
}
_BY_CODE: dict[str, type[JobledgerError]] = {"not_visible_yet": NotVisibleYetError}
_FIXES = {
    401: "give a valid API token: Client(token=...) or JOBLEDGER_TOKEN "
    "(create one with POST /api/v1/tokens or in the dashboard)",
}


def error_from(status: int, content: bytes) -> JobledgerError:
    """The exception for an error answer, from the API's error body when it has one."""
    try:
        detail = msgspec.json.decode(content, type=ErrorBody).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        text = content.decode(errors="replace")[:500] or "no body"
        return _BY_STATUS.get(status, ServerError)(
            f"the server answered {status}: {text}", status=status, fix=_FIXES.get(status)
        )
    kind = _BY_CODE.get(detail.code) or _BY_STATUS.get(status, ServerError)
    return kind(
        detail.message,
        status=status,
        code=detail.code,
        field=detail.field,
        fix=detail.fix or _FIXES.get(status),
    )


__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "ConnectionFailedError",
    "ExecutionCancelledError",
    "ExecutionFailedError",
    "JobledgerError",
    "NotFoundError",
    "NotVisibleYetError",
    "PermissionDeniedError",
    "ServerError",
    "TooManyRequestsError",
    "UnavailableError",
    "ValidationError",
    "WaitTimedOutError",
    "WorkflowFailedError",
    "WorkflowTimedOutError",
    "error_from",
]
