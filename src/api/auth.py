"""Sign-in, sessions, API tokens and users."""

from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import Cookie
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from jobledger.api.common import state_of
from jobledger.api.errors import ApiError, error_spec
from jobledger.api.schemas import NO_NUL, Short, Strict
from jobledger.api.security import (
    ADMIN,
    OPEN,
    SESSION_COOKIE,
    VIEWER,
    SessionAuth,
    client_address,
    json_only,
    principal_of,
    served_over_https,
)
from jobledger.api.state import ApiState
from jobledger.runtime.accounts import (
    ApiToken,
    InvalidCredentialsError,
    LoginThrottledError,
    Role,
    User,
)

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=NO_NUL)]
Password = Annotated[str, msgspec.Meta(max_length=1024, pattern=NO_NUL)]


class LoginIn(Strict):
    username: Short
    password: Password


class Me(msgspec.Struct):
    user: User
    role: Role
    via: str
    csrf_token: str | None
    expires_at: datetime | None = None


class TokenIn(Strict):
    name: Name
    role: Role = Role.VIEWER
    expires_in_days: Annotated[float, msgspec.Meta(ge=0.01, le=3650)] | None = 90


class TokenCreated(msgspec.Struct):
    token: ApiToken
    secret: str


class UserIn(Strict):
    username: Short
    password: Password
    role: Role = Role.VIEWER


class UserPatch(Strict):
    role: Role | None = None
    disabled: bool | None = None
    password: Password | None = None


def _cookie(state: ApiState, request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    mode = state.container.settings.secure_cookies
    secure = mode == "always" or (
        mode == "auto" and served_over_https(request, state.trusted_proxies)
    )
    return Cookie(
        key=SESSION_COOKIE,
        value=value,
        max_age=max_age,
        path="/",
        httponly=True,
        secure=secure,
        samesite="strict",
    )


class AuthController(Controller):
    path = "/api/v1/auth"
    tags = ["auth"]  # noqa: RUF012 (Litestar reads a class attribute)

    @post(
        "/login",
        opt=OPEN,
        guards=[json_only],
        sync_to_thread=True,
        status_code=HTTP_200_OK,
        responses={415: error_spec("The body is not declared application/json.")},
    )
    def login(self, request: Request[Any, Any, Any], data: JSONBody[LoginIn]) -> Response[Me]:
        """Sign in: a new session (an earlier one of this browser ends once this one is
        open; a failed sign-in leaves it as it was). The body must be JSON."""
        state = state_of(request)
        now = state.now()
        address = client_address(request, state.trusted_proxies)
        try:
            user, ticket = state.accounts.login(
                data.username, data.password, address=address, now=now
            )
        except (InvalidCredentialsError, LoginThrottledError) as error:
            reason = "throttled" if isinstance(error, LoginThrottledError) else "credentials"
            state.container.metrics.login_failures.labels(reason=reason).inc()
            raise
        old = request.cookies.get(SESSION_COOKIE)
        if old:
            state.accounts.logout(old)  # rotate: never keep a session id across a sign-in
        max_age = max(1, int((ticket.expires_at - now).total_seconds()))
        body = Me(user, user.role, "session", ticket.csrf_token, ticket.expires_at)
        return Response(body, cookies=[_cookie(state, request, ticket.token, max_age)])

    @post("/logout", opt=VIEWER, sync_to_thread=True, status_code=HTTP_200_OK)
    def logout(self, request: Request[Any, Any, Any]) -> Response[dict[str, str]]:
        state = state_of(request)
        if isinstance(request.auth, SessionAuth):
            state.accounts.logout(request.auth.token)
        return Response({"status": "signed out"}, cookies=[_cookie(state, request, "", 0)])

    @get("/me", opt=VIEWER, sync_to_thread=False)
    def me(self, request: Request[Any, Any, Any]) -> Me:
        principal = principal_of(request)
        csrf = request.auth.csrf_token if isinstance(request.auth, SessionAuth) else None
        return Me(principal.user, principal.role, principal.via, csrf)


class TokenController(Controller):
    path = "/api/v1/tokens"
    tags = ["auth"]  # noqa: RUF012 (Litestar reads a class attribute)

    @post("/", opt=VIEWER, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def create_token(
        self, request: Request[Any, Any, Any], data: JSONBody[TokenIn]
    ) -> TokenCreated:
        """A Bearer token for programs; its secret is shown only in this response."""
        state = state_of(request)
        now = state.now()
        expires = now + timedelta(days=data.expires_in_days) if data.expires_in_days else None
        principal = principal_of(request)
        token, secret = state.accounts.create_token(
            principal.user.id, data.name, data.role, expires_at=expires, now=now, by=principal.role
        )
        return TokenCreated(token, secret)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_tokens(self, request: Request[Any, Any, Any]) -> list[ApiToken]:
        """Your tokens; an admin sees everyone's."""
        principal = principal_of(request)
        owner = None if principal.role.includes(Role.ADMIN) else principal.user.id
        return state_of(request).accounts.list_tokens(owner)

    @delete("/{token_id:uuid}", opt=VIEWER, sync_to_thread=True, status_code=HTTP_200_OK)
    def revoke_token(
        self, request: Request[Any, Any, Any], token_id: FromPath[UUID]
    ) -> dict[str, str]:
        state = state_of(request)
        principal = principal_of(request)
        mine = {t.id for t in state.accounts.list_tokens(principal.user.id)}
        if token_id not in mine and not principal.role.includes(Role.ADMIN):
            # Someone else's token answers like a missing one: ids are not disclosed.
            raise ApiError(404, f"no API token {token_id} of yours")
        state.accounts.revoke_token(token_id, now=state.now())
        return {"status": "revoked"}


class UserController(Controller):
    path = "/api/v1/users"
    tags = ["users"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=ADMIN, sync_to_thread=True)
    def list_users(self, request: Request[Any, Any, Any]) -> list[User]:
        return state_of(request).accounts.list_users()

    @post("/", opt=ADMIN, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def create_user(self, request: Request[Any, Any, Any], data: JSONBody[UserIn]) -> User:
        state = state_of(request)
        return state.accounts.create_user(
            data.username, data.password, data.role, now=state.now(), by=principal_of(request).role
        )

    @patch("/{user_id:uuid}", opt=ADMIN, sync_to_thread=True)
    def update_user(
        self, request: Request[Any, Any, Any], user_id: FromPath[UUID], data: JSONBody[UserPatch]
    ) -> User:
        state = state_of(request)
        return state.accounts.update_user(
            user_id,
            role=data.role,
            disabled=data.disabled,
            password=data.password,
            now=state.now(),
            by=principal_of(request).role,
        )

    @delete("/{user_id:uuid}", opt=ADMIN, sync_to_thread=True, status_code=HTTP_200_OK)
    def delete_user(
        self, request: Request[Any, Any, Any], user_id: FromPath[UUID]
    ) -> dict[str, str]:
        state_of(request).accounts.delete_user(user_id, by=principal_of(request).role)
        return {"status": "deleted"}
