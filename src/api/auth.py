"""Sign-in, sessions, API tokens and users."""

from datetime import datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from jobledger.api.common import Cursor, Limit, linked
from jobledger.api.errors import error_spec
from jobledger.api.schemas import NO_NUL, Short, Strict
from jobledger.api.security import (
    ADMIN,
    OPEN,
    SESSION_COOKIE,
    VIEWER,
    SessionAuth,
    api_state,
    client_address,
    json_only,
    principal_of,
    served_over_https,
)
from jobledger.api.state import ApiState
from jobledger.domain.clock import Clock
from jobledger.domain.roles import Role
from jobledger.infra.accounts import ApiToken, User
from jobledger.services.accounts import AccountService
from jobledger.services.actors import Actor
from jobledger.services.identities import (
    InvalidCredentialsError,
    LoginThrottledError,
    SessionTicket,
)
from jobledger.services.pages import Order

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
    # A new password revokes the user's API tokens too, unless they are to stay.
    keep_tokens: bool = False


def _cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    state = api_state(request)
    mode = state.ports.settings.secure_cookies
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


def _sign_in(
    state: ApiState,
    accounts: AccountService,
    data: LoginIn,
    *,
    address: str,
    old: str | None,
    now: datetime,
) -> tuple[User, SessionTicket]:
    try:
        user, ticket = accounts.login(data.username, data.password, address=address, at=now)
    except (InvalidCredentialsError, LoginThrottledError) as error:
        reason = "throttled" if isinstance(error, LoginThrottledError) else "credentials"
        state.ports.metrics.login_failures.labels(reason=reason).inc()
        raise
    if old:
        accounts.logout(old)  # rotate: never keep a session id across a sign-in
    return user, ticket


class AuthController(Controller):
    path = "/api/v1/auth"
    tags = ["auth"]  # noqa: RUF012 (Litestar reads a class attribute)

    @post(
        "/login",
        opt=OPEN,
        guards=[json_only],
        status_code=HTTP_200_OK,
        responses={415: error_spec("The body is not declared application/json.")},
    )
    async def login(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[LoginIn],
        accounts: NamedDependency[AccountService],
        clock: NamedDependency[Clock],
    ) -> Response[Me]:
        """Sign in: a new session (an earlier one of this browser ends once this one is
        open; a failed sign-in leaves it as it was). The body must be JSON. A sign-in
        waits for its password check without holding a request thread; while
        ``JOBLEDGER_LOGIN_QUEUE`` sign-ins wait already, it answers 429."""
        state = api_state(request)
        now = clock()
        address = client_address(request, state.trusted_proxies)
        old = request.cookies.get(SESSION_COOKIE)

        def sign_in() -> tuple[User, SessionTicket]:
            return _sign_in(state, accounts, data, address=address, old=old, now=now)

        user, ticket = await state.gate.check_password(sign_in)
        max_age = max(1, int((ticket.expires_at - now).total_seconds()))
        body = Me(user, user.role, "session", ticket.csrf_token, ticket.expires_at)
        return Response(body, cookies=[_cookie(request, ticket.token, max_age)])

    @post("/logout", opt=VIEWER, sync_to_thread=True, status_code=HTTP_200_OK)
    def logout(
        self, request: Request[Any, Any, Any], accounts: NamedDependency[AccountService]
    ) -> Response[dict[str, str]]:
        if isinstance(request.auth, SessionAuth):
            accounts.logout(request.auth.token)
        return Response({"status": "signed out"}, cookies=[_cookie(request, "", 0)])

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
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[TokenIn],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> TokenCreated:
        """A Bearer token for programs; its secret is shown only in this response. One
        a token asks for expires no later than that token, and is revoked with it."""
        expires_in = timedelta(days=data.expires_in_days) if data.expires_in_days else None
        parent = principal_of(request).token_id
        token, secret = accounts.create_token(
            data.name, data.role, expires_in=expires_in, at=clock(), by=actor, minted_by=parent
        )
        return TokenCreated(token, secret)

    @get("/", opt=VIEWER, sync_to_thread=True)
    def list_tokens(
        self,
        request: Request[Any, Any, Any],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[ApiToken]]:
        """Your tokens, the oldest first; an admin sees everyone's. A page at a time:
        the ``Link`` header names the next."""
        tokens = accounts.tokens(by=actor)
        return linked(request, tokens, TOKENS, limit=limit, cursor=cursor)

    @delete("/{token_id:uuid}", opt=VIEWER, sync_to_thread=True, status_code=HTTP_200_OK)
    def revoke_token(
        self,
        token_id: FromPath[UUID],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> dict[str, str]:
        accounts.revoke_token(token_id, at=clock(), by=actor)
        return {"status": "revoked"}


class UserController(Controller):
    path = "/api/v1/users"
    tags = ["users"]  # noqa: RUF012 (Litestar reads a class attribute)

    @get("/", opt=ADMIN, sync_to_thread=True)
    def list_users(
        self,
        request: Request[Any, Any, Any],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> Response[list[User]]:
        """The users by name, a page at a time: the ``Link`` header names the next."""
        users = accounts.users(by=actor)
        return linked(request, users, USERS, limit=limit, cursor=cursor)

    @post("/", opt=ADMIN, sync_to_thread=True, status_code=HTTP_201_CREATED)
    def create_user(
        self,
        data: JSONBody[UserIn],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> User:
        return accounts.create_user(data.username, data.password, data.role, at=clock(), by=actor)

    @patch("/{user_id:uuid}", opt=ADMIN, sync_to_thread=True)
    def update_user(
        self,
        user_id: FromPath[UUID],
        data: JSONBody[UserPatch],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
        clock: NamedDependency[Clock],
    ) -> User:
        return accounts.update_user(
            user_id,
            role=data.role,
            disabled=data.disabled,
            password=data.password,
            keep_tokens=data.keep_tokens,
            at=clock(),
            by=actor,
        )

    @delete("/{user_id:uuid}", opt=ADMIN, sync_to_thread=True, status_code=HTTP_200_OK)
    def delete_user(
        self,
        user_id: FromPath[UUID],
        accounts: NamedDependency[AccountService],
        actor: NamedDependency[Actor],
    ) -> dict[str, str]:
        accounts.delete_user(user_id, by=actor)
        return {"status": "deleted"}


def _token_key(token: ApiToken) -> tuple[int, str]:
    return (round(token.created_at.timestamp() * 1_000_000), str(token.id))


TOKENS = Order[ApiToken]("tokens", _token_key, width=2)
USERS = Order[User]("users", lambda user: (user.username,))
