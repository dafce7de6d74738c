"""What both clients share around sending: where to send (``JOBLEDGER_URL``), as whom
(``JOBLEDGER_TOKEN``), when to try again, and how an answer becomes a result or an
exception."""

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import httpx

from jobledger.client.calls import Call
from jobledger.client.errors import ConnectionFailedError, JobledgerError, error_from

T = TypeVar("T")
URL_VARIABLE = "JOBLEDGER_URL"
TOKEN_VARIABLE = "JOBLEDGER_TOKEN"  # noqa: S105 (the variable's name, not a secret)
DEFAULT_URL = "http://127.0.0.1:8000"  # where `jobledger dev` serves
# The failures after which a request may not have reached the server, or its answer not
# the client: sending it again is safe (a POST carries its Idempotency-Key).
RETRIED_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
MAX_RETRY_AFTER = 30.0


def _agent() -> str:
    try:
        return f"jobledger-client/{version('jobledger')}"
    except PackageNotFoundError:
        return "jobledger-client"


@dataclass(frozen=True)
class Target:
    """The server and the credential: from the arguments, else the environment."""

    url: str
    token: str | None

    def __repr__(self) -> str:
        # A client's repr lands in logs, tracebacks and notebooks: never its token.
        token = "None" if self.token is None else "'***'"
        return f"Target(url={self.url!r}, token={token})"

    @classmethod
    def of(cls, url: str | None, token: str | None) -> "Target":
        chosen = url or os.environ.get(URL_VARIABLE) or DEFAULT_URL
        return cls(chosen.rstrip("/"), token or os.environ.get(TOKEN_VARIABLE) or None)

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": _agent(), "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


@dataclass(frozen=True)
class Retrying:
    """Retries after a 503 or a broken connection: ``retries`` more tries, each after a
    back-off that doubles from ``backoff`` to ``max_backoff`` (full jitter), or after
    the server's Retry-After when it says one."""

    retries: int = 5
    backoff: float = 0.2
    max_backoff: float = 5.0

    def attempts(self) -> Iterator[int]:
        return iter(range(self.retries + 1))

    def pause(self, attempt: int, retry_after: str | None = None) -> float | None:
        """How long to wait before trying again after ``attempt`` (0-based); None when
        no try is left."""
        if attempt >= self.retries:
            return None
        ceiling = min(self.backoff * 2**attempt, self.max_backoff)
        pause = random.uniform(0, ceiling)  # noqa: S311 (jitter, not a secret)
        if retry_after and retry_after.strip().isdigit():
            pause = max(pause, min(float(retry_after), MAX_RETRY_AFTER))
        return pause


def answered(call: Call[T], response: httpx.Response) -> T:
    """The result of an answer, or the exception it stands for."""
    if response.status_code < 400 or response.status_code in call.answers:  # noqa: PLR2004 (HTTP)
        if call.read is not None:
            return call.read(response.content, response.headers)
        return call.decode(response.content)
    raise error_from(response.status_code, response.content)


def retried(call: Call[Any], response: httpx.Response) -> bool:
    """Whether this answer asks to be tried again: a 503 (a store was unreachable and
    nothing was saved, or the change was saved whole: its key tells on a retry)."""
    return response.status_code == 503 and 503 not in call.answers  # noqa: PLR2004 (HTTP)


def unreachable(target: Target, error: Exception) -> JobledgerError:
    return ConnectionFailedError(
        f"no answer from jobledger at {target.url} ({type(error).__name__}: {error})",
        fix=f"check {URL_VARIABLE} and that `jobledger api` runs there",
    )


def request_timeout(default: float, call: Call[Any]) -> float:
    """A long-poll may take its wait on top of the usual time."""
    return default + (call.timeout or 0.0)


@dataclass(frozen=True)
class Connection:
    """What a client sends with, and how it reacts to each try's outcome; the two
    clients differ only in how they wait and send."""

    target: Target
    timeout: float
    retrying: Retrying

    @classmethod
    def of(
        cls, url: str | None, token: str | None, *, timeout: float, retries: int, backoff: float
    ) -> "Connection":
        return cls(Target.of(url, token), timeout, Retrying(retries=retries, backoff=backoff))

    def client_options(self) -> dict[str, Any]:
        """The options of the httpx client."""
        target = self.target
        return {"base_url": target.url, "headers": target.headers(), "timeout": self.timeout}

    def request(self, call: Call[Any]) -> dict[str, Any]:
        """The arguments of ``httpx.Client.request`` for one try of ``call``."""
        return {
            "method": call.method,
            "url": call.path,
            "params": call.params,
            "content": call.content(),
            "headers": {**call.headers(), "Content-Type": "application/json"},
            "timeout": request_timeout(self.timeout, call),
        }

    def after_error(self, attempt: int, error: Exception) -> float:
        """The pause before the next try after a broken connection; raises when no
        try is left."""
        pause = self.retrying.pause(attempt)
        if pause is None:
            raise unreachable(self.target, error) from error
        return pause

    def after_answer(self, attempt: int, call: Call[Any], response: httpx.Response) -> float | None:
        """The pause before trying again, or None when this answer is the outcome."""
        pause = self.retrying.pause(attempt, response.headers.get("Retry-After"))
        return pause if pause is not None and retried(call, response) else None
