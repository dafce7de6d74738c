"""The accounts as their store hands them over: users, API tokens, and what a sign-in, a
session and a token are checked against (ADR 13).

They sit below the use cases because the store that fills them (an adapter) may not
import a use case; the rules over them are in ``jobledger.services.identities``.
Times are kept to the millisecond, as the tables keep them.
"""

from datetime import UTC, datetime, timedelta
from uuid import UUID

import msgspec

from jobledger.domain.roles import Role

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def millis(moment: datetime) -> int:
    """``moment`` in whole milliseconds since the epoch, rounded down."""
    # Integer arithmetic: a float timestamp can be off by a millisecond. A naive
    # datetime raises here instead of being read as local time.
    return (moment - _EPOCH) // _MS


def from_millis(ms: int) -> datetime:
    return _EPOCH + ms * _MS


def from_millis_or_none(ms: int | None) -> datetime | None:
    return None if ms is None else from_millis(ms)


class User(msgspec.Struct, frozen=True):
    id: UUID
    username: str
    role: Role
    disabled: bool
    created_at: datetime


class ApiToken(msgspec.Struct, frozen=True):
    id: UUID
    name: str
    role: Role
    user_id: UUID
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class SignIn(msgspec.Struct, frozen=True):
    """A user as a sign-in checks it: with the stored password hash."""

    user: User
    password_hash: str


class StoredSession(msgspec.Struct, frozen=True):
    """A session's row, with its user; ``id`` (its token's digest) is the key."""

    user: User
    csrf_token: str
    last_seen_at: datetime
    expires_at: datetime


class NewSession(msgspec.Struct, frozen=True):
    """A session to open: ``digest`` is its token's hash, the only form stored."""

    digest: str
    csrf_token: str
    created_at: datetime
    expires_at: datetime


class StoredKey(msgspec.Struct, frozen=True):
    """An API token as a request that presents it is checked: with its user."""

    user: User
    token: ApiToken
