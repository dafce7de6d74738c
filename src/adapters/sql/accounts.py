"""The accounts tables (migrations; ADR 13): users, sessions, API tokens and login
failures, on either store. Times are integer milliseconds; ids are text."""

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from jobledger.domain.roles import Role
from jobledger.infra.accounts import (
    ApiToken,
    NewSession,
    SignIn,
    StoredKey,
    StoredSession,
    User,
    from_millis,
    from_millis_or_none,
    millis,
)
from jobledger.projections.database import Cursor, Database

# Every query that reads a user starts with these five columns, in this order (_user).
_USER = "u.id, u.username, u.role, u.disabled, u.created_at"
_SELECT_USER = f"SELECT {_USER} FROM jobledger_users u"  # noqa: S608 (constant names)
# The eight columns of a token, in the order of _token.
_KEY_COLUMNS = "id, name, role, user_id, created_at, expires_at, revoked_at, last_used_at"
_SELECT_TOKENS = f"SELECT {_KEY_COLUMNS} FROM jobledger_api_tokens"  # noqa: S608 (constant names)
_INSERT_USER = (
    "INSERT INTO jobledger_users (id, username, password_hash, role, disabled, "
    "created_at, updated_at, password_changed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_AN_ADMIN = (
    f"{_SELECT_USER} WHERE u.role = 'admin' AND NOT u.disabled "
    "ORDER BY CASE WHEN u.username = ? THEN 0 ELSE 1 END, u.created_at, u.id LIMIT 1"
)
# Lock the enabled admins' rows first (PostgreSQL; SQLite serialises writers anyway).
_LOCK_ADMINS = "UPDATE jobledger_users SET role = role WHERE role = 'admin' AND NOT disabled"
_OTHER_ADMINS = (
    "SELECT count(*) FROM jobledger_users WHERE role = 'admin' AND NOT disabled AND id <> ?"
)
_INSERT_SESSION = (
    "INSERT INTO jobledger_sessions "
    "(id, user_id, csrf_token, created_at, last_seen_at, expires_at) "
    "SELECT ?, id, ?, ?, ?, ? FROM jobledger_users "
    # Still the password that was verified, and still enabled: a password change or a
    # disable that committed during the verification wins.
    "WHERE id = ? AND password_hash = ? AND NOT disabled"
)
_SESSION_OF = (
    f"SELECT {_USER}, s.csrf_token, s.last_seen_at, s.expires_at "  # noqa: S608 (constant names)
    "FROM jobledger_sessions s JOIN jobledger_users u ON u.id = s.user_id WHERE s.id = ?"
)
_API_KEY_OF = (
    f"SELECT {_USER}, t.id, t.name, t.role, t.user_id, t.created_at, "  # noqa: S608 (constant names)
    "t.expires_at, t.revoked_at, t.last_used_at "
    "FROM jobledger_api_tokens t JOIN jobledger_users u ON u.id = t.user_id "
    "WHERE t.token_hash = ?"
)
_LOGIN_USER = f"SELECT {_USER}, u.password_hash FROM jobledger_users u WHERE u.username = ?"  # noqa: S608 (constant names)
# The caller rate-limits these; the condition keeps the time from moving back if two
# requests race.
_TOUCH_SESSION = "UPDATE jobledger_sessions SET last_seen_at = ? WHERE id = ? AND last_seen_at < ?"
_TOUCH_API_KEY = (
    "UPDATE jobledger_api_tokens SET last_used_at = ? "
    "WHERE token_hash = ? AND (last_used_at IS NULL OR last_used_at < ?)"
)
_INSERT_API_KEY = (
    "INSERT INTO jobledger_api_tokens (id, name, token_hash, user_id, role, "
    "created_at, expires_at, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_REVOKE_API_KEY = (
    "UPDATE jobledger_api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
)
# Every token minted from the token ?, at any depth, revoked at ?.
_REVOKE_DESCENDANTS = (
    "WITH RECURSIVE tree (id) AS ("
    "SELECT id FROM jobledger_api_tokens WHERE parent_id = ? "
    "UNION SELECT t.id FROM jobledger_api_tokens t JOIN tree ON t.parent_id = tree.id) "
    "UPDATE jobledger_api_tokens SET revoked_at = ? "
    "WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL"
)
# Compare-and-set: a password changed meanwhile is not overwritten by the old one's rehash.
_REHASH = "UPDATE jobledger_users SET password_hash = ? WHERE id = ? AND password_hash = ?"
# The store's single row exists on both backends (SQLite serialises writers anyway).
_LOCK_THROTTLE = "UPDATE jobledger_store SET store_id = store_id"
_RECORD_FAILURE = "INSERT INTO jobledger_login_failures (key, at_ms) VALUES (?, ?)"
_RELEASE_FAILURE = "DELETE FROM jobledger_login_failures WHERE key = ? AND at_ms = ?"
_NTH_FAILURE = (
    "SELECT at_ms FROM jobledger_login_failures WHERE key = ? AND at_ms > ? "
    "ORDER BY at_ms DESC LIMIT 1 OFFSET ?"
)


def _user(row: Sequence[Any]) -> User:
    return User(
        id=UUID(row[0]),
        username=row[1],
        role=Role(row[2]),
        disabled=bool(row[3]),
        created_at=from_millis(row[4]),
    )


def _token(row: Sequence[Any]) -> ApiToken:
    return ApiToken(
        id=UUID(row[0]),
        name=row[1],
        role=Role(row[2]),
        user_id=UUID(row[3]),
        created_at=from_millis(row[4]),
        expires_at=from_millis_or_none(row[5]),
        revoked_at=from_millis_or_none(row[6]),
        last_used_at=from_millis_or_none(row[7]),
    )


def _or_none(millis_or_none: datetime | None) -> int | None:
    return None if millis_or_none is None else millis(millis_or_none)


class SqlAccountTransaction:
    """The account tables inside one transaction of the store's database."""

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Any:  # noqa: ANN401 (DB-API)
        return self._cursor.execute(sql, params)

    def find_user(self, user_id: UUID) -> User | None:
        row = self._run(f"{_SELECT_USER} WHERE u.id = ?", (str(user_id),)).fetchone()
        return None if row is None else _user(row)

    def enabled_admins_besides(self, user_id: UUID) -> int:
        self._run(_LOCK_ADMINS)
        return int(self._run(_OTHER_ADMINS, (str(user_id),)).fetchone()[0])

    def set_role(self, user_id: UUID, role: Role) -> None:
        self._run("UPDATE jobledger_users SET role = ? WHERE id = ?", (role.value, str(user_id)))

    def set_disabled(self, user_id: UUID, *, disabled: bool) -> None:
        self._run("UPDATE jobledger_users SET disabled = ? WHERE id = ?", (disabled, str(user_id)))

    def set_password(self, user_id: UUID, password_hash: str, *, at: datetime) -> None:
        self._run(
            "UPDATE jobledger_users SET password_hash = ?, password_changed_at = ? WHERE id = ?",
            (password_hash, millis(at), str(user_id)),
        )

    def mark_updated(self, user_id: UUID, *, at: datetime) -> None:
        self._run(
            "UPDATE jobledger_users SET updated_at = ? WHERE id = ?", (millis(at), str(user_id))
        )

    def end_sessions(self, user_id: UUID) -> None:
        self._run("DELETE FROM jobledger_sessions WHERE user_id = ?", (str(user_id),))

    def revoke_tokens(self, user_id: UUID, *, at: datetime) -> None:
        self._run(
            "UPDATE jobledger_api_tokens SET revoked_at = ? "
            "WHERE user_id = ? AND revoked_at IS NULL",
            (millis(at), str(user_id)),
        )

    def delete_user(self, user_id: UUID) -> None:
        uid = str(user_id)
        self._run("DELETE FROM jobledger_api_tokens WHERE user_id = ?", (uid,))
        self._run("DELETE FROM jobledger_users WHERE id = ?", (uid,))

    def lock_throttle(self) -> None:
        self._run(_LOCK_THROTTLE)

    def nth_failure(self, key: str, *, after: datetime, offset: int) -> datetime | None:
        row = self._run(_NTH_FAILURE, (key, millis(after), offset)).fetchone()
        return None if row is None else from_millis(row[0])

    def record_failures(self, keys: Sequence[str], *, at: datetime) -> None:
        self._cursor.executemany(_RECORD_FAILURE, [(key, millis(at)) for key in keys])

    def forget_failures(self, *, up_to: datetime) -> None:
        self._run("DELETE FROM jobledger_login_failures WHERE at_ms <= ?", (millis(up_to),))

    def sign_in(self, username: str) -> SignIn | None:
        row = self._run(_LOGIN_USER, (username,)).fetchone()
        return None if row is None else SignIn(_user(row), str(row[5]))

    def insert_session(self, session: NewSession, user_id: UUID, password_hash: str) -> bool:
        created, expires = millis(session.created_at), millis(session.expires_at)
        values = (session.digest, session.csrf_token, created, created, expires)
        inserted = self._run(_INSERT_SESSION, (*values, str(user_id), password_hash))
        return bool(inserted.rowcount == 1)

    def clear_failures(self, key: str) -> None:
        self._run("DELETE FROM jobledger_login_failures WHERE key = ?", (key,))

    def release_failure(self, key: str, *, at: datetime) -> None:
        self._run(_RELEASE_FAILURE, (key, millis(at)))

    def end_expired_sessions(self, *, at: datetime) -> None:
        self._run("DELETE FROM jobledger_sessions WHERE expires_at <= ?", (millis(at),))

    def rehash(self, user_id: UUID, password_hash: str, *, replacing: str) -> None:
        self._run(_REHASH, (password_hash, str(user_id), replacing))

    def lock_token(self, token_id: UUID) -> ApiToken | None:
        tid = str(token_id)
        self._run("UPDATE jobledger_api_tokens SET revoked_at = revoked_at WHERE id = ?", (tid,))
        row = self._run(f"{_SELECT_TOKENS} WHERE id = ?", (tid,)).fetchone()
        return None if row is None else _token(row)

    def insert_token(self, token: ApiToken, digest: str, *, parent_id: UUID | None) -> None:
        row = (str(token.id), token.name, digest, str(token.user_id), token.role.value)
        parent = None if parent_id is None else str(parent_id)
        self._run(
            _INSERT_API_KEY, (*row, millis(token.created_at), _or_none(token.expires_at), parent)
        )


class SqlAccountStore:
    """The account tables in the event store's database (``AccountStore``)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SqlAccountTransaction]:
        with self._database.transaction() as cursor:
            yield SqlAccountTransaction(cursor)

    def insert_user(self, user: User, password_hash: str) -> bool:
        at = millis(user.created_at)
        row = (str(user.id), user.username, password_hash, user.role.value, user.disabled)
        try:
            with self._database.transaction() as cursor:
                cursor.execute(_INSERT_USER, (*row, at, at, at))
        except (sqlite3.IntegrityError, psycopg.IntegrityError):
            return False
        return True

    def find_user(self, user_id: UUID) -> User | None:
        with self._database.transaction(snapshot=True) as cursor:
            return SqlAccountTransaction(cursor).find_user(user_id)

    def list_users(self) -> list[User]:
        return [_user(row) for row in self._all(f"{_SELECT_USER} ORDER BY u.username")]

    def an_admin(self, preferring: str) -> User | None:
        row = self._one(_AN_ADMIN, (preferring,))
        return None if row is None else _user(row)

    def find_session(self, digest: str) -> StoredSession | None:
        row = self._one(_SESSION_OF, (digest,))
        if row is None:
            return None
        return StoredSession(_user(row), row[5], from_millis(row[6]), from_millis(row[7]))

    def touch_session(self, digest: str, *, at: datetime) -> None:
        self._touch(_TOUCH_SESSION, digest, at)

    def delete_session(self, digest: str) -> None:
        with self._database.transaction() as cursor:
            cursor.execute("DELETE FROM jobledger_sessions WHERE id = ?", (digest,))

    def find_key(self, digest: str) -> StoredKey | None:
        row = self._one(_API_KEY_OF, (digest,))
        return None if row is None else StoredKey(_user(row), _token(row[5:]))

    def touch_key(self, digest: str, *, at: datetime) -> None:
        self._touch(_TOUCH_API_KEY, digest, at)

    def list_tokens(self, user_id: UUID | None = None) -> list[ApiToken]:
        sql, params = _SELECT_TOKENS, tuple[str, ...]()
        if user_id is not None:
            sql, params = f"{sql} WHERE user_id = ?", (str(user_id),)
        return [_token(row) for row in self._all(f"{sql} ORDER BY created_at, id", params)]

    def revoke_token(self, token_id: UUID, *, at: datetime) -> bool:
        tid, ms = str(token_id), millis(at)
        with self._database.transaction() as cursor:
            found = cursor.execute("SELECT 1 FROM jobledger_api_tokens WHERE id = ?", (tid,))
            if found.fetchone() is None:
                return False
            # First the token itself, in its own statement: a mint from it waits for
            # this (see lock_token), and the next statement sees that mint's child.
            cursor.execute(_REVOKE_API_KEY, (ms, tid))
            cursor.execute(_REVOKE_DESCENDANTS, (tid, ms))
        return True

    def _touch(self, sql: str, digest: str, at: datetime) -> None:
        ms = millis(at)
        with self._database.transaction() as cursor:
            cursor.execute(sql, (ms, digest, ms))

    def _one(self, sql: str, params: Sequence[Any]) -> Any:  # noqa: ANN401 (DB-API)
        with self._database.transaction(snapshot=True) as cursor:
            return cursor.execute(sql, params).fetchone()

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._database.transaction(snapshot=True) as cursor:
            batches = list(cursor.stream(sql, params))
        return [row for batch in batches for row in batch]
