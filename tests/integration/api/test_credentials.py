"""Credentials over HTTP: grants capped by the caller, sign-in that other sites cannot
drive, throttling that neither parallel requests nor a forged header get around."""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime

import httpx
import pytest
from tests.integration.api.conftest import PASSWORD, Api

from jobledger.domain.roles import Role
from jobledger.infra import credentials

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WRONG = "not the password at all"


def weak_token_of(api: Api, username: str, role: Role) -> httpx.Client:
    """A client with a token of ``role`` that belongs to the user ``username``."""
    accounts = api.container.accounts()
    user = next(u for u in accounts.list_users() if u.username == username)
    _, secret = accounts.create_token(
        user.id, f"{role} of {username}", role, expires_at=None, now=datetime.now(tz=UTC)
    )
    client = httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    api.clients.append(client)
    return client


def test_a_token_cannot_mint_a_token_above_its_own_role(api: Api) -> None:
    """If an admin's token that holds only the viewer role asks for an admin or operator
    token, then it gets 403 and no token is made; a viewer token it may create, and
    that one cannot read the users."""
    weak = weak_token_of(api, "admin", Role.VIEWER)
    before = len(api.container.accounts().list_tokens())
    for role in ("admin", "operator"):
        refused = weak.post("/api/v1/tokens", json={"name": "escalate", "role": role})
        assert refused.status_code == 403, refused.text
        assert "holds the viewer role" in refused.json()["error"]["message"]
    assert len(api.container.accounts().list_tokens()) == before
    made = weak.post("/api/v1/tokens", json={"name": "fine", "role": "viewer"})
    assert made.status_code == 201, made.text
    minted = httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {made.json()['secret']}"}
    )
    api.clients.append(minted)
    assert minted.get("/api/v1/users").status_code == 403


def test_an_operator_token_of_an_admin_cannot_grant_admin(api: Api) -> None:
    """If an admin's operator-role token asks for an admin token, then it is refused,
    and the user routes stay closed to it whatever it sends."""
    operator = weak_token_of(api, "admin", Role.OPERATOR)
    assert operator.post("/api/v1/tokens", json={"name": "x", "role": "admin"}).status_code == 403
    assert (
        operator.post(
            "/api/v1/users", json={"username": "eve", "password": PASSWORD, "role": "admin"}
        ).status_code
        == 403
    )
    assert operator.get("/api/v1/users").status_code == 403


def test_sign_in_takes_only_json(api: Api) -> None:
    """If a sign-in arrives as a form a browser would send across sites (text/plain,
    urlencoded), then it gets 415 naming the fix and no session cookie; the OpenAPI
    document lists that answer."""
    body = '{"username": "admin", "password": "' + PASSWORD + '"}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
        client = httpx.Client(base_url=api.url, timeout=30)
        api.clients.append(client)
        headers = {"Content-Type": content_type} if content_type else {}
        response = client.post("/api/v1/auth/login", content=body, headers=headers)
        assert response.status_code == 415, (content_type, response.text)
        assert "application/json" in response.json()["error"]["fix"]
        assert "set-cookie" not in response.headers
    assert api.session("admin").get("/api/v1/auth/me").status_code == 200
    document = api.client().get("/schema/openapi.json").json()
    assert "415" in document["paths"]["/api/v1/auth/login"]["post"]["responses"]


def test_a_failed_sign_in_keeps_the_session(api: Api) -> None:
    """If a signed-in browser sends a sign-in with a wrong password, then it gets 401
    and its session still works."""
    browser = api.session("operator")
    failed = browser.post("/api/v1/auth/login", json={"username": "operator", "password": WRONG})
    assert failed.status_code == 401
    assert browser.get("/api/v1/auth/me").json()["user"]["username"] == "operator"


def guesses(api: Api, forwarded: list[str]) -> list[int]:
    """One wrong sign-in per header value (each for another name), in order."""
    client = httpx.Client(base_url=api.url, timeout=30)
    api.clients.append(client)
    return [
        client.post(
            "/api/v1/auth/login",
            json={"username": f"guess{n}", "password": WRONG},
            headers={"X-Forwarded-For": value},
        ).status_code
        for n, value in enumerate(forwarded)
    ]


def test_a_forged_forwarded_for_gets_no_fresh_bucket(api: Api) -> None:
    """If a client that is not a trusted proxy rotates X-Forwarded-For, then its own
    address is throttled after 5 failures all the same."""
    statuses = guesses(api, [f"198.51.100.{n}" for n in range(7)])
    assert statuses == [401] * 5 + [429] * 2


def test_behind_a_trusted_proxy_the_forwarded_client_counts(
    api_with: Callable[..., AbstractContextManager[Api]],
) -> None:
    """If the peer is a trusted proxy, then the right-most address of X-Forwarded-For
    that is not a trusted proxy is the client: distinct clients get their own buckets,
    and one client that forges addresses to the left of it does not."""
    with api_with(trusted_proxies="127.0.0.0/8") as proxied:
        distinct = guesses(proxied, [f"203.0.113.{n}" for n in range(6)])
        assert distinct == [401] * 6
        forged = guesses(proxied, [f"198.51.100.{n}, 192.0.2.7, 127.0.0.9" for n in range(6)])
        assert forged == [401] * 5 + [429]


def count_verifications(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the password verifications of every PasswordHashing in this process (the
    real argon2 verification still runs); the count is the list's one item."""
    count, lock = [0], threading.Lock()
    original = credentials.PasswordHashing.verify

    def verify(hashing: credentials.PasswordHashing, stored: str | None, password: str) -> bool:
        with lock:
            count[0] += 1
        return original(hashing, stored, password)

    monkeypatch.setattr(credentials.PasswordHashing, "verify", verify)
    return count


def test_parallel_guesses_get_no_more_checks_than_the_limit(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If 16 wrong passwords for one account arrive at once, then at most 5 argon2
    verifications run and the other requests get 429."""
    verified = count_verifications(monkeypatch)
    start = threading.Barrier(16)

    def guess(_: int) -> int:
        with httpx.Client(base_url=api.url, timeout=60) as client:
            start.wait()
            body = {"username": "viewer", "password": WRONG}
            return client.post("/api/v1/auth/login", json=body).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = sorted(pool.map(guess, range(16)))
    assert verified == [5]
    assert statuses == [401] * 5 + [429] * 11


def test_only_a_trusted_proxy_says_the_client_used_https(
    api: Api, api_with: Callable[..., AbstractContextManager[Api]]
) -> None:
    """If X-Forwarded-Proto: https comes from a trusted proxy, then the session cookie
    is marked Secure (JOBLEDGER_SECURE_COOKIES=auto); from any other peer it is not."""
    body = {"username": "viewer", "password": PASSWORD}
    headers = {"X-Forwarded-Proto": "https"}

    def cookie(served: Api) -> str:
        with httpx.Client(base_url=served.url, timeout=30) as client:
            response = client.post("/api/v1/auth/login", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return response.headers["set-cookie"].lower()

    assert "secure" not in cookie(api)
    with api_with(trusted_proxies="127.0.0.1") as proxied:
        assert "secure" in cookie(proxied)
