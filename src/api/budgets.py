"""The callers' budgets (ADR 77): requests per credential and per client address, runs
created per minute and open long-polls per credential, and the queue of sign-ins
waiting for a password check.

A refusal is a 429 with ``Retry-After`` and, for the request budget, the RateLimit
header fields of the IETF draft (``RateLimit-Limit``, ``RateLimit-Remaining``,
``RateLimit-Reset``), which every answer within the budget carries too. A credential
is known by its secret's digest, before it is looked up: a flood of made-up tokens
spends the address's budget and never reaches the database.
"""

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import structlog
from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.datastructures import MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.status_codes import HTTP_429_TOO_MANY_REQUESTS
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from jobledger.api.errors import error_response
from jobledger.api.security import SESSION_COOKIE, api_state, client_address
from jobledger.infra import credentials
from jobledger.infra.budgets import US_PER_MS, Allowance, Ask, Budgets, Verdict
from jobledger.infra.outages import OUTAGE_ERRORS
from jobledger.infra.settings import Settings
from jobledger.schemas.system import ErrorBody

log = structlog.get_logger(__name__)

T = TypeVar("T")
US_PER_S = 1_000_000
MS_PER_S = 1000
# A long-poll's hold outlives its wait by this much, in case its process dies holding it.
HOLD_SLACK_MS = 30_000
# Sign-ins run their password checks this many at once (the argon2 slots).
PASSWORD_CHECKS_AT_ONCE = credentials.HASHING_AT_ONCE


class OverBudgetError(Exception):
    """A budget refused the request; nothing was done for it."""

    def __init__(
        self, message: str, *, fix: str, retry_after_us: int, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.retry_after = max(1, math.ceil(retry_after_us / US_PER_S))
        self.headers = {**(headers or {}), "Retry-After": str(self.retry_after)}


def over_budget(_: Request[Any, Any, Any], error: OverBudgetError) -> Response[ErrorBody]:
    return error_response(
        HTTP_429_TOO_MANY_REQUESTS, error.message, fix=error.fix, headers=error.headers
    )


def rate_headers(verdict: Verdict) -> dict[str, str]:
    """The draft's three fields: the limit, what is left, seconds until it is whole."""
    return {
        "RateLimit-Limit": str(verdict.limit),
        "RateLimit-Remaining": str(verdict.remaining),
        "RateLimit-Reset": str(math.ceil(verdict.reset_us / US_PER_S)),
    }


def credential_of(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """Which credential a request carries (a Bearer token or a session cookie), as a
    digest of its secret; None for none."""
    scheme, _, value = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return "t" + credentials.token_digest(value.strip())[:32]
    cookie = connection.cookies.get(SESSION_COOKIE)
    return "s" + credentials.token_digest(cookie)[:32] if cookie else None


@dataclass(frozen=True)
class Limits:
    """The budgets' sizes, from the settings."""

    per_credential: Allowance
    per_address: Allowance
    runs: Allowance
    long_polls: int
    login_queue: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "Limits":
        window = round(settings.api_budget_window_seconds * US_PER_S)
        return cls(
            per_credential=Allowance(settings.api_requests_per_credential, window),
            per_address=Allowance(settings.api_requests_per_address, window),
            runs=Allowance(settings.api_runs_per_minute, 60 * US_PER_S),
            long_polls=settings.api_long_polls,
            login_queue=settings.login_queue,
        )


class Gate:
    """The budgets of one app: what its middleware, routes and sign-ins ask."""

    def __init__(self, budgets: Budgets, limits: Limits, state: Any) -> None:  # noqa: ANN401 (the ApiState; typed loosely to avoid a cycle)
        self.budgets = budgets
        self.limits = limits
        self._state = state
        self._checks: anyio.CapacityLimiter | None = None
        self._waiting = 0

    def now_us(self) -> int:
        moment = self._state.now()
        return int(moment.timestamp() * US_PER_S)

    async def call(self, fn: Callable[[], T]) -> T:
        """``fn`` from an event loop: in a thread if it waits on the network."""
        if self.budgets.blocking:
            return await anyio.to_thread.run_sync(fn)
        return fn()

    def _guarded(self, fn: Callable[[], T], fallback: T) -> T:
        """``fn``, or ``fallback`` while the budgets' store is unreachable: an outage of
        Redis does not close the API to reads that need only PostgreSQL (ADR 77)."""
        try:
            return fn()
        except OUTAGE_ERRORS as error:
            health = self._state.ports.health
            health.report(error, health.clock())
            return fallback

    # ---- requests --------------------------------------------------------------------

    def request_asks(self, address: str, credential: str | None) -> list[Ask]:
        asks = [Ask(f"req:a:{credentials.address_bucket(address)}", self.limits.per_address)]
        if credential is not None:
            asks.append(Ask(f"req:c:{credential}", self.limits.per_credential))
        return asks

    def take_request(self, asks: list[Ask]) -> Verdict | None:
        """Spend one request from ``asks``; None while the store is unreachable."""
        now = self.now_us()
        return self._guarded(lambda: self.budgets.take(asks, 1, now_us=now), None)

    # ---- runs ------------------------------------------------------------------------

    def take_runs(self, credential: str | None, count: int) -> None:
        """Spend ``count`` runs of the credential's per-minute budget, or raise
        OverBudgetError. Called from a route's thread, before anything is written."""
        allowance = self.limits.runs
        if credential is None or count <= 0:
            return
        if count > allowance.limit:
            raise OverBudgetError(
                f"this request would create {count} runs; a credential may create at most "
                f"{allowance.limit} a minute",
                fix=f"send at most {allowance.limit} runs at once",
                retry_after_us=60 * US_PER_S,
            )
        ask = Ask(f"runs:c:{credential}", allowance)
        now = self.now_us()
        verdict = self._guarded(lambda: self.budgets.take([ask], count, now_us=now), None)
        if verdict is not None and not verdict.allowed:
            raise OverBudgetError(
                f"this credential has created its {allowance.limit} runs a minute; "
                f"{verdict.remaining} more may be created now, this request asks for {count}",
                fix="wait for Retry-After, or send fewer runs at once",
                retry_after_us=verdict.retry_after_us,
            )

    # ---- long-polls ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def long_poll(self, credential: str | None, wait_seconds: float) -> AsyncIterator[None]:
        """Hold one of the credential's long-polls while the body runs, or raise
        OverBudgetError if it holds all of them."""
        if credential is None:
            yield
            return
        name, cap = f"polls:c:{credential}", self.limits.long_polls
        now_ms = self.now_us() // US_PER_MS
        until_ms = now_ms + math.ceil(wait_seconds * MS_PER_S) + HOLD_SLACK_MS

        def hold() -> tuple[str | None, int]:
            return self.budgets.hold(name, cap, until_ms=until_ms, now_ms=now_ms)

        # Held without a ticket while the store is unreachable (ADR 77).
        unheld: tuple[str | None, int] = ("", 0)
        ticket, wait_ms = await self.call(lambda: self._guarded(hold, unheld))
        if ticket is None:
            raise OverBudgetError(
                f"this credential has {cap} long-polls open, the most it may have",
                fix="wait for an open long-poll to answer, or ask without wait",
                retry_after_us=wait_ms * US_PER_MS,
            )
        try:
            yield
        finally:
            if ticket:
                await self.call(lambda: self._release(name, ticket))

    def _release(self, name: str, ticket: str) -> None:
        self._guarded(lambda: self.budgets.release(name, ticket), None)

    # ---- sign-ins --------------------------------------------------------------------

    async def check_password(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (a sign-in, with its password check) on one of the password
        slots, waiting without a request thread; refuse at once with OverBudgetError
        while ``login_queue`` sign-ins wait already."""
        if self._checks is None:  # made in the event loop that uses it
            self._checks = anyio.CapacityLimiter(PASSWORD_CHECKS_AT_ONCE)
        waiting = self._waiting - PASSWORD_CHECKS_AT_ONCE
        if waiting >= self.limits.login_queue:
            raise OverBudgetError(
                f"{waiting} sign-ins are waiting for a password check already",
                fix="sign in again in a moment",
                retry_after_us=US_PER_S,
            )
        self._waiting += 1
        try:
            return await anyio.to_thread.run_sync(fn, limiter=self._checks)
        finally:
            self._waiting -= 1


def gate_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Gate:
    gate: Gate = api_state(connection).gate
    return gate


class BudgetMiddleware:
    """Spends one request of the client address's budget and of the credential's, or
    answers 429; every answer says what is left (RateLimit-*)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        request: Request[Any, Any, Any] = Request(scope, receive)
        state = api_state(request)
        gate: Gate = state.gate
        address = client_address(request, state.trusted_proxies)
        asks = gate.request_asks(address, credential_of(request))
        verdict = await gate.call(lambda: gate.take_request(asks))
        if verdict is None:
            await self.app(scope, receive, send)
            return
        headers = rate_headers(verdict)
        if not verdict.allowed:
            whose = "this client address" if verdict.refused == 0 else "this credential"
            raise OverBudgetError(
                f"{whose} has used its {verdict.limit} requests per "
                f"{gate.limits.per_credential.window_us // US_PER_S} s",
                fix="wait for Retry-After before the next request",
                retry_after_us=verdict.retry_after_us,
                headers=headers,
            )
        await self.app(scope, receive, _with_headers(send, headers))


def _with_headers(send: Send, headers: dict[str, str]) -> Callable[[Message], Awaitable[None]]:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            fields = MutableScopeHeaders.from_message(message)
            for name, value in headers.items():
                fields[name] = value
        await send(message)

    return sending


@dataclass(frozen=True)
class RunBudget:
    """A route's way to spend the calling credential's runs per minute (a dependency)."""

    gate: Gate
    credential: str | None

    def take(self, count: int) -> None:
        """Spend ``count`` runs, or raise OverBudgetError: call it before writing."""
        self.gate.take_runs(self.credential, count)


def provide_run_budget(request: Request[Any, Any, Any]) -> RunBudget:
    return RunBudget(gate_of(request), credential_of(request))
