"""Credentials over HTTP, as an attacker who holds one would try them: the tokens a
token mints, a password reset, common passwords."""

from datetime import datetime
from typing import Any

import httpx
import pytest
from tests.integration.api.conftest import PASSWORD, Api

from jobledger.domain.roles import Role

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def bearer(api: Api, secret: str) -> httpx.Client:
    client = httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {secret}"})
    api.clients.append(client)
    return client


def minted(client: httpx.Client, **body: Any) -> dict[str, Any]:
    """A token the ``client``'s credential creates: its row and its secret."""
    response = client.post("/api/v1/tokens", json={"name": "child", **body})
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def expiry(made: dict[str, Any]) -> datetime | None:
    text = made["token"]["expires_at"]
    return None if text is None else datetime.fromisoformat(text)


def test_a_token_minted_by_a_token_expires_no_later_than_its_parent(api: Api) -> None:
    """If a token that expires in a day mints a token for 90 days, or for ever, then
    the child expires when its parent does, or earlier; a session mints as asked."""
    parent = minted(api.session("operator"), expires_in_days=1)
    parent_expiry = expiry(parent)
    assert parent_expiry is not None
    client = bearer(api, parent["secret"])
    for asked in (90, None, 0.5):
        child = expiry(minted(client, expires_in_days=asked))
        assert child is not None, asked
        assert child <= parent_expiry, asked
    assert expiry(minted(api.session("operator"), expires_in_days=90)) != parent_expiry


def test_revoking_a_token_revokes_what_it_minted(api: Api) -> None:
    """If a token is revoked, then the tokens it minted, and theirs, answer 401 too; a
    token it did not mint goes on."""
    session = api.session("operator")
    parent = minted(session)
    child = minted(bearer(api, parent["secret"]))
    grandchild = minted(bearer(api, child["secret"]))
    other = minted(session)
    revoked = session.delete(f"/api/v1/tokens/{parent['token']['id']}")
    assert revoked.status_code == 200, revoked.text
    for made in (parent, child, grandchild):
        assert bearer(api, made["secret"]).get("/api/v1/auth/me").status_code == 401
    assert bearer(api, other["secret"]).get("/api/v1/auth/me").status_code == 200
    rows = {t["id"]: t for t in session.get("/api/v1/tokens").json()}
    assert rows[grandchild["token"]["id"]]["revoked_at"] is not None


def test_a_password_reset_ends_sessions_and_tokens_unless_kept(api: Api) -> None:
    """If an admin resets a user's password, then the user's sessions and API tokens
    answer 401; with ``keep_tokens`` the tokens go on (the sessions still end)."""
    admin = api.client(Role.ADMIN)
    user = admin.post(
        "/api/v1/users", json={"username": "carol", "password": PASSWORD, "role": "operator"}
    ).json()
    password = PASSWORD
    for keep, token_status in ((False, 401), (True, 200)):
        session = api.session("carol", password)
        token = bearer(api, minted(session)["secret"])
        password = f"{PASSWORD} {keep}"
        patch = {"password": password, "keep_tokens": keep}
        reset = admin.patch(f"/api/v1/users/{user['id']}", json=patch)
        assert reset.status_code == 200, reset.text
        assert session.get("/api/v1/auth/me").status_code == 401
        assert token.get("/api/v1/auth/me").status_code == token_status


@pytest.mark.parametrize("password", ["password1234", "Qwertyuiop123!", "P@ssw0rd2024!"])
def test_a_common_password_is_refused(api: Api, password: str) -> None:
    """If a new or reset password is one of the common ones (with digits or symbols
    around it), then it is refused naming the password, the problem and the fix, and
    nothing changes."""
    admin = api.client(Role.ADMIN)
    made = admin.post(
        "/api/v1/users", json={"username": "dave", "password": password, "role": "viewer"}
    )
    assert made.status_code == 422, made.text
    error = made.json()["error"]
    assert error["field"] == "password"
    assert "common password" in error["message"]
    assert "unrelated words" in error["fix"]
    assert "dave" not in {u["username"] for u in admin.get("/api/v1/users").json()}
    viewer = next(u for u in admin.get("/api/v1/users").json() if u["username"] == "viewer")
    reset = admin.patch(f"/api/v1/users/{viewer['id']}", json={"password": password})
    assert reset.status_code == 422, reset.text
    assert api.session("viewer").get("/api/v1/auth/me").status_code == 200
