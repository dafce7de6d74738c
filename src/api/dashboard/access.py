"""How page routes refuse: browsers are sent to the login page or shown an error page,
other clients get the API's JSON error.

The same refusals answer differently by the ``Accept`` header, so that a page route
is as closed to a script as an API route is, and a person is never left on a blank
page or a JSON body.
"""

from typing import Any
from urllib.parse import quote

from litestar import Request, Response
from litestar.exceptions import NotAuthorizedException, NotFoundException, PermissionDeniedException
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER
from litestar.types import ExceptionHandlersMap

from jobledger.api.errors import error_response, unavailable
from jobledger.api.security import SESSION_COOKIE
from jobledger.domain.errors import NotFoundError, UndecodableEventError
from jobledger.infra.outages import OUTAGE_ERRORS

DASHBOARD = "/ui"
LOGIN = f"{DASHBOARD}/login"


def wants_html(request: Request[Any, Any, Any]) -> bool:
    return "text/html" in request.headers.get("accept", "")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: only a dashboard path of this site (an absolute
    or protocol-relative URL would make the login page an open redirect)."""
    if not target or not target.startswith(DASHBOARD) or target.startswith(LOGIN):
        return DASHBOARD
    if "\\" in target or target.startswith("//"):
        return DASHBOARD
    return target


def login_url(request: Request[Any, Any, Any], *, expired: bool) -> str:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    url = f"{LOGIN}?next={quote(safe_next(here), safe='/')}"
    return f"{url}&expired=1" if expired else url


def _unauthenticated(
    request: Request[Any, Any, Any], error: NotAuthorizedException
) -> Response[Any]:
    if not wants_html(request):
        return error_response(error.status_code, str(error.detail))
    expired = bool(request.cookies.get(SESSION_COOKIE))
    return Redirect(login_url(request, expired=expired), status_code=HTTP_303_SEE_OTHER)


def error_page(
    status: int, title: str, message: str, headers: dict[str, str] | None = None
) -> Template:
    return Template(
        template_name="error.html",
        context={"title": title, "message": message, "status": status},
        status_code=status,
        headers=headers,
    )


def _forbidden(request: Request[Any, Any, Any], error: PermissionDeniedException) -> Response[Any]:
    if not wants_html(request):
        return error_response(error.status_code, str(error.detail))
    return error_page(error.status_code, "Not allowed", str(error.detail))


def _not_found(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    message = str(error.detail) if isinstance(error, NotFoundException) else str(error)
    if not wants_html(request):
        return error_response(404, message)
    return error_page(404, "Not found", message)


def _undecodable(request: Request[Any, Any, Any], error: UndecodableEventError) -> Response[Any]:
    message = str(error)
    if not wants_html(request):
        return error_response(409, message)
    return error_page(409, "Cannot be rebuilt", message)


def _unavailable(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    answer = unavailable(request, error)
    if not wants_html(request) or "Retry-After" not in answer.headers:
        return answer
    message = answer.content.error.message
    return error_page(
        503, "Unavailable for now", message, {"Retry-After": answer.headers["Retry-After"]}
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    NotAuthorizedException: _unauthenticated,
    PermissionDeniedException: _forbidden,
    NotFoundException: _not_found,
    NotFoundError: _not_found,
    UndecodableEventError: _undecodable,
    **dict.fromkeys(OUTAGE_ERRORS, _unavailable),
}
