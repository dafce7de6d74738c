"""Who is asking, and may they: sessions, API tokens, CSRF and role guards.

Deny by default: every route declares the role it needs in ``opt["role"]`` or is
marked ``opt["public"]``; a route with neither is refused for everyone, so a new route
cannot ship unguarded by omission. Cookie sessions must echo their CSRF token in the
``X-CSRF-Token`` header on unsafe methods; Bearer tokens are not sent by browsers on
their own, so they need none.
"""

import hmac
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from litestar.connection import ASGIConnection
from litestar.datastructures import MutableScopeHeaders
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.status_codes import HTTP_415_UNSUPPORTED_MEDIA_TYPE
from litestar.types import Message, Scope

from jobledger.api.errors import ApiError
from jobledger.api.state import ApiState
from jobledger.domain.roles import Role
from jobledger.infra.settings import IPNetwork
from jobledger.services.identities import Principal

SESSION_COOKIE = "jl_session"
CSRF_HEADER = "X-CSRF-Token"
PUBLIC = "public"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The OpenAPI document and its viewers: public, so clients can be generated from it.
SCHEMA_PATH = "/schema"


@dataclass(frozen=True)
class SessionAuth:
    """What a cookie session carries besides the principal."""

    token: str
    csrf_token: str


def api_state(connection: ASGIConnection[Any, Any, Any, Any]) -> ApiState:
    state: ApiState = connection.app.state["api"]
    return state


class AuthMiddleware(AbstractAuthenticationMiddleware):
    """Resolves a Bearer token or a session cookie into a Principal; refuses others."""

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        state = api_state(connection)
        bearer = _bearer(connection.headers.get("authorization"))
        if bearer is not None:
            # A token read a moment ago is answered here; otherwise on a thread (ADR 103).
            principal = state.services.accounts.recent_token_principal(bearer, at=state.now())
            if principal is None:
                principal = await anyio.to_thread.run_sync(_resolve_token, state, bearer)
            if principal is None:
                raise NotAuthorizedException("the API token is unknown, expired or revoked")
            return AuthenticationResult(user=principal, auth=None)
        token = connection.cookies.get(SESSION_COOKIE)
        if token:
            resolved = await anyio.to_thread.run_sync(_resolve_session, state, token)
            if resolved is not None:
                principal, csrf = resolved
                _check_csrf(connection, csrf)
                return AuthenticationResult(user=principal, auth=SessionAuth(token, csrf))
            raise NotAuthorizedException("the session has expired; sign in again")
        raise NotAuthorizedException(
            "sign in first: POST /api/v1/auth/login, or send 'Authorization: Bearer <token>'"
        )


def still_signed_in(connection: ASGIConnection[Any, Any, Any, Any]) -> Callable[[], bool]:
    """Whether the request's credential still holds (call it on a thread): a long
    answer (the log's stream) asks now and then, and ends once its session was signed
    out or expired, or its token revoked or expired."""
    state = api_state(connection)
    bearer = _bearer(connection.headers.get("authorization"))
    session = connection.cookies.get(SESSION_COOKIE)

    def holds() -> bool:
        if bearer is not None:
            return _resolve_token(state, bearer) is not None
        return session is not None and _resolve_session(state, session) is not None

    return holds


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise NotAuthorizedException("use 'Authorization: Bearer <token>'")
    return value.strip()


def _resolve_token(state: ApiState, token: str) -> Principal | None:
    return state.services.accounts.token_principal(token, at=state.now())


def _resolve_session(state: ApiState, token: str) -> tuple[Principal, str] | None:
    return state.services.accounts.session(token, at=state.now())


def _check_csrf(connection: ASGIConnection[Any, Any, Any, Any], expected: str) -> None:
    if connection.scope.get("method", "GET") in SAFE_METHODS:
        return
    sent = connection.headers.get(CSRF_HEADER.lower(), "")
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise PermissionDeniedException(
            f"missing or wrong {CSRF_HEADER} header; send the csrf_token from "
            "GET /api/v1/auth/me with every change"
        )


async def no_sniffing(message: Message, _scope: Scope) -> None:
    """A before-send hook: every response, errors and static files included, says
    ``X-Content-Type-Options: nosniff``, so a browser never runs a response (an error
    quoting input, an uploaded-looking body) as a script or a page its type does not
    declare."""
    if message["type"] == "http.response.start":
        headers = MutableScopeHeaders.from_message(message)
        headers["X-Content-Type-Options"] = "nosniff"


def role_guard(
    connection: ASGIConnection[Any, Any, Any, Any], route_handler: BaseRouteHandler
) -> None:
    """The app-wide guard: the route's declared role, or refuse."""
    if route_handler.opt.get(PUBLIC) or _is_schema(connection.scope.get("path", "")):
        return
    needed = route_handler.opt.get("role")
    if not isinstance(needed, Role):
        raise PermissionDeniedException("this route declares no role, so it is closed")
    principal = connection.user
    if not isinstance(principal, Principal) or not principal.role.includes(needed):
        raise PermissionDeniedException(f"this needs the {needed} role")


def _is_schema(path: str) -> bool:
    return path == SCHEMA_PATH or path.startswith(SCHEMA_PATH + "/")


def json_only(
    connection: ASGIConnection[Any, Any, Any, Any], _route_handler: BaseRouteHandler
) -> None:
    """A route guard: the body must be declared JSON. A browser sends a cross-site form
    (text/plain, urlencoded, multipart) without asking first; JSON it never sends across
    sites without the server's consent, so a route that needs no CSRF token (sign-in)
    cannot be driven by another site."""
    media_type = connection.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(
            HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"this route takes application/json, not {media_type[:100] or 'an untyped body'}",
            fix="send the body as JSON with the header Content-Type: application/json",
        )


def client_address(
    connection: ASGIConnection[Any, Any, Any, Any], trusted: Sequence[IPNetwork]
) -> str:
    """The address a request came from, for throttling and the log.

    The peer, unless the peer is a trusted proxy: then ``X-Forwarded-For`` is read from
    the right (each proxy appends the address it saw) and the first address that is not
    a trusted proxy is the client. Anyone can write the left part of that header, so
    nothing left of the first untrusted address counts.
    """
    peer = connection.client.host if connection.client else ""
    if not _trusted(peer, trusted):
        return peer or "unknown"
    hops = [
        hop.strip()
        for value in connection.headers.getall("x-forwarded-for", [])
        for hop in value.split(",")
    ]
    client = peer
    for hop in reversed(hops):
        if not _is_address(hop):
            break  # a malformed hop: the last address a trusted proxy vouched for stays
        client = hop
        if not _trusted(hop, trusted):
            break
    return client


def served_over_https(
    connection: ASGIConnection[Any, Any, Any, Any], trusted: Sequence[IPNetwork]
) -> bool:
    """Whether the client used https: the request's own scheme, or, from a trusted
    proxy only, its ``X-Forwarded-Proto``."""
    if connection.url.scheme == "https":
        return True
    peer = connection.client.host if connection.client else ""
    if not _trusted(peer, trusted):
        return False
    proto = connection.headers.get("x-forwarded-proto", "").rpartition(",")[2]
    return proto.strip().lower() == "https"


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _trusted(host: str, trusted: Sequence[IPNetwork]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped  # a dual-stack socket shows IPv4 peers this way
    return any(address.version == net.version and address in net for net in trusted)


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    principal = connection.user
    if not isinstance(principal, Principal):
        raise NotAuthorizedException("sign in first")
    return principal


VIEWER: dict[str, Any] = {"role": Role.VIEWER}
OPERATOR: dict[str, Any] = {"role": Role.OPERATOR}
ADMIN: dict[str, Any] = {"role": Role.ADMIN}
OPEN: dict[str, Any] = {PUBLIC: True}
