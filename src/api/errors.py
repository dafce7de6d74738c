"""One JSON error shape for every refusal, and the map from errors to HTTP statuses.

Every error body is ``{"error": {"status", "code", "message", "field"?, "fix"?}}``. A
user's mistake gets a 4xx and a message that names the problem (and the fix where
there is one); a store that cannot be reached gets a 503 with ``Retry-After``; anything
else gets a 500 with no internals and is logged.
"""

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import structlog
from litestar import Litestar, MediaType, Request, Response
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Schema
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_401_UNAUTHORIZED,
    HTTP_403_FORBIDDEN,
    HTTP_404_NOT_FOUND,
    HTTP_409_CONFLICT,
    HTTP_422_UNPROCESSABLE_ENTITY,
    HTTP_429_TOO_MANY_REQUESTS,
    HTTP_500_INTERNAL_SERVER_ERROR,
    HTTP_503_SERVICE_UNAVAILABLE,
)

from jobledger.domain.errors import (
    AlreadyExistsError,
    ConflictError,
    DomainError,
    InvalidDefinitionError,
    InvalidTransitionError,
    JobNotActiveError,
    NotFoundError,
    UndecodableEventError,
)
from jobledger.domain.json_values import MAX_DEPTH
from jobledger.infra.outages import OUTAGE_ERRORS, dependency_of
from jobledger.schemas.system import ErrorBody, ErrorDetail
from jobledger.services import identities as accounts
from jobledger.services.errors import (
    AlreadyRunningError,
    InvalidRequestError,
    KeyReusedError,
    NotDeadLetteredError,
    NotPermittedError,
    NotYetVisibleError,
    ServiceError,
    StoresUnavailableError,
)

if TYPE_CHECKING:
    from jobledger.api.state import ApiState

log = structlog.get_logger(__name__)

SCHEMA_FIX = "check the request against the schema at /schema"

_CODES = {
    HTTP_400_BAD_REQUEST: "bad_request",
    HTTP_401_UNAUTHORIZED: "unauthenticated",
    HTTP_403_FORBIDDEN: "forbidden",
    HTTP_404_NOT_FOUND: "not_found",
    405: "method_not_allowed",
    HTTP_409_CONFLICT: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    HTTP_422_UNPROCESSABLE_ENTITY: "invalid",
    HTTP_429_TOO_MANY_REQUESTS: "too_many_requests",
    HTTP_500_INTERNAL_SERVER_ERROR: "internal_error",
    503: "unavailable",
}


class ApiError(Exception):
    """A refusal decided in the API layer itself (a bad query value, a missing header)."""

    def __init__(
        self, status: int, message: str, *, field: str | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.fix = fix


def error_response(
    status: int,
    message: str,
    *,
    field: str | None = None,
    fix: str | None = None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> Response[ErrorBody]:
    detail = ErrorDetail(status, code or _CODES.get(status, "error"), message, field, fix)
    return Response(
        ErrorBody(detail), status_code=status, media_type=MediaType.JSON, headers=headers
    )


def _api_error(_: Request[Any, Any, Any], error: ApiError) -> Response[ErrorBody]:
    return error_response(error.status, error.message, field=error.field, fix=error.fix)


# The domain names its own fields; the API's bodies spell a few of them differently.
_API_FIELDS = {
    "schedule.expression": "schedule.cron",
    "timeout": "timeout_seconds",
    "retry.initial_backoff": "retry.initial_backoff_seconds",
    "retry.max_backoff": "retry.max_backoff_seconds",
    "trigger_key": "Idempotency-Key",
}


def _invalid_definition(
    _: Request[Any, Any, Any], error: InvalidDefinitionError
) -> Response[ErrorBody]:
    # A definition of a set names its job first: jobs[billing.monthly].schedule.cron.
    job, dot, inner = error.field.rpartition("].")
    field = f"{job}{dot}{_API_FIELDS.get(inner, inner)}"
    return error_response(
        HTTP_422_UNPROCESSABLE_ENTITY, f"{field}: {error.problem}", field=field, fix=error.fix
    )


_DOMAIN_STATUS: tuple[tuple[type[DomainError], int], ...] = (
    (NotFoundError, HTTP_404_NOT_FOUND),
    (AlreadyExistsError, HTTP_409_CONFLICT),
    (ConflictError, HTTP_409_CONFLICT),
    (InvalidTransitionError, HTTP_409_CONFLICT),
    (JobNotActiveError, HTTP_409_CONFLICT),
)


def _status_of(
    error: Exception, table: tuple[tuple[type[Exception], int], ...], default: int
) -> int:
    """The status of the first kind in ``table`` that ``error`` is."""
    return next((code for kind, code in table if isinstance(error, kind)), default)


def _domain_error(_: Request[Any, Any, Any], error: DomainError) -> Response[ErrorBody]:
    return error_response(_status_of(error, _DOMAIN_STATUS, HTTP_400_BAD_REQUEST), str(error))


def _undecodable(_: Request[Any, Any, Any], error: UndecodableEventError) -> Response[Any]:
    return error_response(HTTP_409_CONFLICT, str(error))


_SERVICE_STATUS: tuple[tuple[type[ServiceError], int], ...] = (
    (NotPermittedError, HTTP_403_FORBIDDEN),
    (NotYetVisibleError, HTTP_404_NOT_FOUND),
    (KeyReusedError, HTTP_409_CONFLICT),
    (NotDeadLetteredError, HTTP_409_CONFLICT),
    (AlreadyRunningError, HTTP_409_CONFLICT),
    (InvalidRequestError, HTTP_422_UNPROCESSABLE_ENTITY),
    (StoresUnavailableError, HTTP_503_SERVICE_UNAVAILABLE),
)


# Codes finer than the status's, where a client acts on the difference: a run not in
# the read model yet is worth waiting for, one that does not exist is not.
_SERVICE_CODES: tuple[tuple[type[ServiceError], str], ...] = (
    (NotYetVisibleError, "not_visible_yet"),
)


def _service_error(_: Request[Any, Any, Any], error: ServiceError) -> Response[ErrorBody]:
    status = _status_of(error, _SERVICE_STATUS, HTTP_400_BAD_REQUEST)
    code = next((code for kind, code in _SERVICE_CODES if isinstance(error, kind)), None)
    return error_response(status, error.message, field=error.field, fix=error.fix, code=code)


_ACCOUNT_STATUS: tuple[tuple[type[accounts.AccountError], int], ...] = (
    (accounts.InvalidCredentialsError, HTTP_401_UNAUTHORIZED),
    (accounts.AccountNotFoundError, HTTP_404_NOT_FOUND),
    (accounts.AccountExistsError, HTTP_409_CONFLICT),
    (accounts.LastAdminError, HTTP_409_CONFLICT),
    (accounts.RoleTooHighError, HTTP_403_FORBIDDEN),
)


def _account_error(_: Request[Any, Any, Any], error: accounts.AccountError) -> Response[ErrorBody]:
    if isinstance(error, accounts.LoginThrottledError):
        seconds = max(1, int(error.retry_after.total_seconds()))
        return error_response(
            HTTP_429_TOO_MANY_REQUESTS,
            str(error),
            fix=f"wait {seconds} s before trying again",
            headers={"Retry-After": str(seconds)},
        )
    status = _status_of(error, _ACCOUNT_STATUS, HTTP_422_UNPROCESSABLE_ENTITY)
    return error_response(status, str(error), field=error.field, fix=error.fix)


def _validation(_: Request[Any, Any, Any], error: ValidationException) -> Response[ErrorBody]:
    """msgspec and parameter errors: name the first offending field."""
    extra = error.extra if isinstance(error.extra, list) else []
    first = extra[0] if extra and isinstance(extra[0], dict) else {}
    if _body_missing(first, error):
        return error_response(
            HTTP_400_BAD_REQUEST, "body: is missing", field="body", fix=_SEND_A_BODY
        )
    message = str(first.get("message") or error.detail)
    # Litestar names the whole body "data" or "body": that names no field a user wrote.
    whole_body = first.get("key") in _BODY_ARGUMENTS
    field = None if whole_body else first.get("key")
    fix = SCHEMA_FIX
    if unknown := _UNKNOWN_FIELD.search(message):
        field = f"{field}.{unknown[1]}" if field else unknown[1]
        fix = "remove that field; the fields each request takes are listed at /schema"
    elif whole_body:
        field = "body"  # the body as a whole is of the wrong kind (null, an array, ...)
    if field:
        message = f"{field}: {message}"
    return error_response(HTTP_400_BAD_REQUEST, message, field=field, fix=fix)


def _body_missing(first: dict[str, Any], error: ValidationException) -> bool:
    """Whether no body came where a route takes one: Litestar then reports the missing
    argument (its message is the argument's name, ``'data'``), not a field."""
    key = first.get("key")
    if key not in _BODY_ARGUMENTS or first.get("source") != "body":
        return False
    # A field missing from a body that came is "... field `name` - at `$.data`".
    return str(error.__cause__) == f"Object missing required field `{key}`"


_BODY_ARGUMENTS = frozenset({"data", "body"})
_SEND_A_BODY = (
    "send a JSON object with Content-Type: application/json; the fields each request "
    "takes are listed at /schema"
)
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")
# msgspec ends a refusal with where it happened: `` - at `$.retry.max_attempts` ``.
_PLACE = re.compile(r" - at `\$(.*)`$")
# Where Litestar puts the body among a route's arguments.
_IN_BODY = re.compile(r"\.(?:data|body)(?=[.\[]|$)")


def problem_and_place(message: str) -> tuple[str, str | None]:
    """A msgspec error's message split into the problem and where it is (the path after
    ``$``, e.g. ``.limits`` or ``[0].name``); None where it names no place."""
    found = _PLACE.search(message)
    return (message[: found.start()], found[1]) if found else (message, None)


def _body_field_error(error: HTTPException) -> Response[ErrorBody] | None:
    """A body field that shares its name with a dependency a route is given (``limits``,
    ``jobs``) is taken for a failed dependency, and Litestar answers 500. The decoder's
    path says the fault lies in the request body: answer it as the client's mistake."""
    cause = error.__cause__
    if error.status_code != HTTP_500_INTERNAL_SERVER_ERROR:
        return None
    if not isinstance(cause, msgspec.ValidationError):
        return None
    problem, place = problem_and_place(str(cause))
    if place is None or not (body := _IN_BODY.match(place)):
        return None
    field = place[body.end() :].removeprefix(".") or None
    message = f"{field}: {problem}" if field else f"body: {problem}"
    return error_response(HTTP_400_BAD_REQUEST, message, field=field or "body", fix=SCHEMA_FIX)


def _http(_: Request[Any, Any, Any], error: HTTPException) -> Response[ErrorBody]:
    if isinstance(error.__cause__, SerializationException):
        return _unreadable_body(str(error.__cause__))
    if body_error := _body_field_error(error):
        return body_error
    headers = dict(error.headers or {})
    return error_response(error.status_code, str(error.detail), headers=headers or None)


def _unreadable_body(detail: str) -> Response[ErrorBody]:
    # msgspec names the place as $[...][...] once the body is read without its type,
    # which says nothing to a user; the problem itself is worth keeping.
    problem = detail.split(" - at ", 1)[0]
    return error_response(
        HTTP_400_BAD_REQUEST,
        f"body: not JSON that can be stored ({problem})",
        field="body",
        fix="send a JSON document whose numbers fit in 64 bits (integers) or a double (others)",
    )


def _recursion(request: Request[Any, Any, Any], error: RecursionError) -> Response[ErrorBody]:
    """A body nested deeper than the decoder goes: the client's mistake, not a crash."""
    if "deserializ" not in str(error):
        return _unexpected(request, error)
    return error_response(
        HTTP_400_BAD_REQUEST,
        "body: nests objects or arrays too deeply to be read",
        field="body",
        fix=f"nest objects and arrays at most {MAX_DEPTH} levels deep",
    )


def unavailable(request: Request[Any, Any, Any], error: Exception) -> Response[ErrorBody]:
    """A store the request needed is unreachable: a 503 the client may retry, and the
    outage goes to the process's tracker (one line when it starts, not one per request)."""
    dependency = dependency_of(error)
    if dependency is None:
        return _unexpected(request, error)
    state: ApiState = request.app.state["api"]
    health = state.ports.health
    health.report(error, health.clock())
    seconds = health.retry_after()
    return error_response(
        HTTP_503_SERVICE_UNAVAILABLE,
        f"{dependency} is unreachable for now; a change this request asked for was saved"
        " whole or not at all",
        fix=f"retry in {seconds} s; repeat a change with the same Idempotency-Key to make"
        " sure it is saved once",
        headers={"Retry-After": str(seconds)},
    )


def _unexpected(request: Request[Any, Any, Any], error: Exception) -> Response[ErrorBody]:
    log.error(
        "api.unhandled_error",
        path=request.url.path,
        method=request.method,
        error=type(error).__name__,
        exc_info=error,
    )
    return error_response(HTTP_500_INTERNAL_SERVER_ERROR, "internal error; see the server log")


_DESCRIPTIONS = {
    HTTP_400_BAD_REQUEST: "The request is malformed: a wrong type, an unknown field, a bad value.",
    HTTP_401_UNAUTHORIZED: "Not signed in, or the session or token is no longer valid.",
    HTTP_403_FORBIDDEN: "The role lacks this right, or the CSRF header is missing.",
    HTTP_404_NOT_FOUND: "Nothing with that id.",
    HTTP_409_CONFLICT: "The change is not allowed in the current state, or clashed with another.",
    413: "The request body is larger than the configured limit.",
    HTTP_422_UNPROCESSABLE_ENTITY: "The definition breaks a rule; the field and the fix are named.",
    HTTP_429_TOO_MANY_REQUESTS: "A budget is spent, or too many failed logins; retry after the "
    "given seconds.",
    503: "A store is unreachable (retry after Retry-After), or a dependency is not ready.",
}


def error_spec(description: str) -> ResponseSpec:
    """An error answer in the OpenAPI document: the error shape, described."""
    return ResponseSpec(data_container=ErrorBody, description=description, generate_examples=False)


ERROR_RESPONSES = {status: error_spec(text) for status, text in _DESCRIPTIONS.items()}


def document_errors(app: Litestar) -> None:
    """Every route may answer with the error shape; say so in the OpenAPI document."""
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if isinstance(handler, HTTPRouteHandler):
                handler.responses = {**ERROR_RESPONSES, **(handler.responses or {})}


def document_closed_bodies(app: Litestar, closed: set[str]) -> None:
    """Request bodies refuse unknown fields; the generated document does not say so by
    itself, so clients (and schema-driven tests) would send extras and expect them kept."""
    components = app.openapi_schema.components
    for name, schema in (components.schemas or {}).items():
        if name in closed and isinstance(schema, Schema):
            schema.additional_properties = False


EXCEPTION_HANDLERS: dict[type[Exception], Callable[..., Response[ErrorBody]]] = {
    ApiError: _api_error,
    InvalidDefinitionError: _invalid_definition,
    DomainError: _domain_error,
    UndecodableEventError: _undecodable,
    ServiceError: _service_error,
    accounts.AccountError: _account_error,
    ValidationException: _validation,
    HTTPException: _http,
    RecursionError: _recursion,
    **dict.fromkeys(OUTAGE_ERRORS, unavailable),
    Exception: _unexpected,
}
