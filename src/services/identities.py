"""Accounts for the REST API: users, server-side sessions, API tokens, login throttling.

Accounts are plain tables beside the event log, not events (ADR 13). Every method that
depends on the time takes ``now``; nothing here reads the clock. Passwords and tokens are
never logged: log lines name the username and the client address only.
"""

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Self, cast
from uuid import UUID, uuid4

import argon2
import msgspec
import psycopg
import structlog

from jobledger.domain.roles import Role
from jobledger.infra import credentials
from jobledger.infra.errors import RuntimeLayerError
from jobledger.infra.settings import PREFIX, Settings
from jobledger.projections.database import Cursor, Database

log = structlog.get_logger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
# Writing last_seen_at on every request would turn every read into a write. The slack
# only ever ends an idle session early (it is judged by an older time), never late.
TOUCH_EVERY = timedelta(minutes=1)
MAX_TOKEN_NAME = 100


class AccountError(RuntimeLayerError):
    """The account operation was refused."""

    field: str | None = None  # the input at fault, as the API's bodies name it
    fix: str | None = None  # how to get past the refusal

    def __init__(
        self, message: str | None = None, *, field: str | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message)
        self.field = field or self.field
        self.fix = fix or self.fix


class AccountExistsError(AccountError):
    """An account with this username exists already; choose another username."""

    field = "username"
    fix = "choose another username"


class AccountNotFoundError(AccountError):
    """There is no such account."""


class TokenNotFoundError(AccountNotFoundError):
    """There is no such API token."""


class InvalidUsernameError(AccountError):
    """The username is not allowed; use 3 to 64 characters: a-z, 0-9, dot, underscore
    or hyphen."""


class InvalidPasswordError(AccountError):
    """The password is too weak; use at least 12 characters."""


class InvalidCredentialsError(AccountError):
    """Unknown username or wrong password."""


class LoginThrottledError(AccountError):
    """Too many failed logins; wait before trying again."""

    def __init__(self, retry_after: timedelta) -> None:
        self.retry_after = retry_after
        seconds = -(-retry_after // timedelta(seconds=1))
        super().__init__(f"too many failed logins; try again in {seconds} s")


class LastAdminError(AccountError):
    """This is the last enabled admin; make another user an admin first."""

    fix = "make another user an admin first"


class RoleTooHighError(AccountError):
    """A grant may not exceed the role that makes it: a credential grants at most what it
    holds, and an API token at most its user's role."""


class InvalidTokenSpecError(AccountError):
    """An API token needs a name of 1 to 100 characters, and an expiry (if any) in the
    future."""


class WeakAdminPasswordError(AccountError):
    """The first admin cannot be created: set JOBLEDGER_ADMIN_PASSWORD to a strong
    password."""


class User(msgspec.Struct, frozen=True):
    id: UUID
    username: str
    role: Role
    disabled: bool
    created_at: datetime


class Principal(msgspec.Struct, frozen=True):
    """Who makes a request: ``role`` is the effective one (a token's, at most its user's)."""

    user: User
    role: Role
    via: str
    token_name: str | None = None  # the API token's name, for a request with one
    token_id: UUID | None = None  # the API token that asks, if one does


class SessionTicket(msgspec.Struct, frozen=True):
    """A new session: ``token`` is shown once (the cookie); only its hash is stored."""

    token: str
    csrf_token: str
    expires_at: datetime


class ApiToken(msgspec.Struct, frozen=True):
    id: UUID
    name: str
    role: Role
    user_id: UUID
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class AccountSettings(msgspec.Struct, frozen=True, kw_only=True):
    session_idle: timedelta = timedelta(minutes=30)
    session_absolute: timedelta = timedelta(hours=12)
    throttle_max_failures: int = 5
    throttle_window: timedelta = timedelta(minutes=15)
    min_password_length: int = 12
    # argon2id's cost: RFC 9106's second recommendation, argon2-cffi's default.
    password_time_cost: int = 3
    password_memory_kib: int = 65_536
    password_parallelism: int = 4

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            session_idle=timedelta(minutes=settings.session_idle_minutes),
            session_absolute=timedelta(hours=settings.session_absolute_hours),
            throttle_max_failures=settings.login_max_failures,
            throttle_window=timedelta(minutes=settings.login_window_minutes),
            password_time_cost=settings.password_time_cost,
            password_memory_kib=settings.password_memory_kib,
            password_parallelism=settings.password_parallelism,
        )

    def hasher(self) -> argon2.PasswordHasher:
        return credentials.argon2id_hasher(
            time_cost=self.password_time_cost,
            memory_kib=self.password_memory_kib,
            parallelism=self.password_parallelism,
        )


def validate_username(username: str) -> str:
    """The username as stored (lower-case); InvalidUsernameError names the rule."""
    problem = credentials.username_problem(username)
    if problem is not None:
        raise InvalidUsernameError(
            f"username refused: {problem}", field="username", fix=f"use {credentials.USERNAME_RULE}"
        )
    return username.lower()


def validate_password(password: str, *, username: str, min_length: int) -> None:
    """InvalidPasswordError naming the broken rule and how to meet it."""
    problem = credentials.password_problem(password, username=username, min_length=min_length)
    if problem is not None:
        raise InvalidPasswordError(f"password refused: {problem}", field="password", fix=problem)


def _ms(moment: datetime) -> int:
    # Integer arithmetic: a float timestamp can be off by a millisecond. A naive
    # datetime raises here instead of being read as local time.
    return (moment - _EPOCH) // _MS


def _at(ms: int) -> datetime:
    return _EPOCH + ms * _MS


def _at_or_none(ms: int | None) -> datetime | None:
    return None if ms is None else _at(ms)


def _capped(role: Role, ceiling: Role) -> Role:
    return role if ceiling.includes(role) else ceiling


def check_grant(
    actor: Role | None, requested: Role, *, what: str = "grant", holder: str = "this credential"
) -> None:
    """RoleTooHighError unless ``actor`` (the effective role of the credential that asks:
    a token's own role, a session's user's role) holds all of ``requested``.

    The one rule for every way to hand out rights: a token's role, a new user's role, a
    role change, and acting on an account (a password reset, an enable, a delete) that
    holds ``requested``. ``None`` is the operator's own tools (start-up, the command
    line), which answer to nobody's credential.
    """
    if actor is None or Role(actor).includes(requested):
        return
    fix = f"use a credential with the {requested} role, or ask for {actor} or lower"
    raise RoleTooHighError(
        f"{holder} holds the {actor} role, so it cannot {what} {requested}; {fix}",
        field="role",
        fix=fix,
    )


# Every query that reads a user starts with these five columns, in this order (_user).
_SELECT_USER = "SELECT u.id, u.username, u.role, u.disabled, u.created_at FROM jobledger_users u"
_SELECT_TOKENS = (
    "SELECT id, name, role, user_id, created_at, expires_at, revoked_at, last_used_at "
    "FROM jobledger_api_tokens"
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
    "SELECT u.id, u.username, u.role, u.disabled, u.created_at, "
    "s.csrf_token, s.last_seen_at, s.expires_at "
    "FROM jobledger_sessions s JOIN jobledger_users u ON u.id = s.user_id WHERE s.id = ?"
)
_API_KEY_OF = (
    "SELECT u.id, u.username, u.role, u.disabled, u.created_at, "
    "t.role, t.expires_at, t.revoked_at, t.last_used_at, t.name, t.id "
    "FROM jobledger_api_tokens t JOIN jobledger_users u ON u.id = t.user_id "
    "WHERE t.token_hash = ?"
)
_LOGIN_USER = (
    "SELECT u.id, u.username, u.role, u.disabled, u.created_at, u.password_hash "
    "FROM jobledger_users u WHERE u.username = ?"
)
# Rate-limited by the caller; the condition keeps the time from moving back if two
# requests race.
_TOUCH_SESSION = "UPDATE jobledger_sessions SET last_seen_at = ? WHERE id = ? AND last_seen_at < ?"
_TOUCH_API_KEY = (
    "UPDATE jobledger_api_tokens SET last_used_at = ? "
    "WHERE token_hash = ? AND (last_used_at IS NULL OR last_used_at < ?)"
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
_LOCK_THROTTLE = "UPDATE jobledger_store SET store_id = store_id"
_RECORD_FAILURE = "INSERT INTO jobledger_login_failures (key, at_ms) VALUES (?, ?)"
# The booking of this attempt (same key and millisecond); a twin booked in the same
# millisecond from the same address goes too, which only ever errs by one guess.
_RELEASE_RESERVATION = "DELETE FROM jobledger_login_failures WHERE key = ? AND at_ms = ?"
# The max-th most recent failure inside the window: while it exists, the bucket is full,
# and it leaves the window exactly when one more attempt is allowed.
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
        created_at=_at(row[4]),
    )


def _token(row: Sequence[Any]) -> ApiToken:
    return ApiToken(
        id=UUID(row[0]),
        name=row[1],
        role=Role(row[2]),
        user_id=UUID(row[3]),
        created_at=_at(row[4]),
        expires_at=_at_or_none(row[5]),
        revoked_at=_at_or_none(row[6]),
        last_used_at=_at_or_none(row[7]),
    )


def _fetch_user(cursor: Cursor, user_id: UUID) -> User | None:
    row = cursor.execute(f"{_SELECT_USER} WHERE u.id = ?", (str(user_id),)).fetchone()
    return None if row is None else _user(row)


def _guard_last_admin(cursor: Cursor, user_id: UUID) -> None:
    """LastAdminError unless an enabled admin other than ``user_id`` remains."""
    # Lock the enabled admins' rows first (PostgreSQL; SQLite serialises writers anyway):
    # otherwise two admins demoting each other would each count the other and both win.
    cursor.execute("UPDATE jobledger_users SET role = role WHERE role = 'admin' AND NOT disabled")
    sql = "SELECT count(*) FROM jobledger_users WHERE role = 'admin' AND NOT disabled AND id <> ?"
    if cursor.execute(sql, (str(user_id),)).fetchone()[0] == 0:
        raise LastAdminError


def _removes_admin(user: User, *, role: Role | None, disabled: bool | None) -> bool:
    if user.role is not Role.ADMIN or user.disabled:
        return False
    return disabled is True or (role is not None and role is not Role.ADMIN)


def _end_sessions(cursor: Cursor, user_id: UUID) -> None:
    cursor.execute("DELETE FROM jobledger_sessions WHERE user_id = ?", (str(user_id),))


def _revoke_tokens(cursor: Cursor, user_id: UUID, at: int) -> None:
    cursor.execute(
        "UPDATE jobledger_api_tokens SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL",
        (at, str(user_id)),
    )


def _apply_changes(
    cursor: Cursor,
    user: User,
    *,
    role: Role | None,
    disabled: bool | None,
    password_hash: str | None,
    keep_tokens: bool,
    at: int,
) -> None:
    uid = str(user.id)
    if role is not None:
        cursor.execute("UPDATE jobledger_users SET role = ? WHERE id = ?", (role.value, uid))
    if disabled is not None:
        cursor.execute("UPDATE jobledger_users SET disabled = ? WHERE id = ?", (disabled, uid))
    if password_hash is not None:
        cursor.execute(
            "UPDATE jobledger_users SET password_hash = ?, password_changed_at = ? WHERE id = ?",
            (password_hash, at, uid),
        )
    # A new password or a disabled account ends the sessions that the old state opened.
    if disabled or password_hash is not None:
        _end_sessions(cursor, user.id)
    # A reset password is often a stolen one: what it may have minted goes with it.
    if disabled or (password_hash is not None and not keep_tokens):
        _revoke_tokens(cursor, user.id, at)
    cursor.execute("UPDATE jobledger_users SET updated_at = ? WHERE id = ?", (at, uid))


def _under_parent(cursor: Cursor, token: ApiToken, parent_id: UUID) -> ApiToken:
    """``token`` as its live parent lets it be: expiring no later. The parent's row is
    locked first, so a revocation of the parent either waits for this mint (and then
    revokes the child too) or comes first (and this mint is refused)."""
    pid = str(parent_id)
    cursor.execute("UPDATE jobledger_api_tokens SET revoked_at = revoked_at WHERE id = ?", (pid,))
    row = cursor.execute(
        "SELECT expires_at, revoked_at FROM jobledger_api_tokens WHERE id = ?", (pid,)
    ).fetchone()
    if row is None or row[1] is not None:
        raise TokenNotFoundError("the token that asks was revoked meanwhile; use a live one")
    ceiling = _at_or_none(row[0])
    if ceiling is None or (token.expires_at is not None and token.expires_at <= ceiling):
        return token
    return msgspec.structs.replace(token, expires_at=ceiling)


def _check_token_spec(name: str, expires_at: datetime | None, now: datetime) -> None:
    if not 1 <= len(name) <= MAX_TOKEN_NAME:
        raise InvalidTokenSpecError(
            f"an API token needs a name of 1 to {MAX_TOKEN_NAME} characters, e.g. 'deploy-bot'",
            field="name",
            fix=f"give the token a name of 1 to {MAX_TOKEN_NAME} characters",
        )
    if expires_at is not None and expires_at <= now:
        raise InvalidTokenSpecError(
            "an API token's expiry must be in the future; leave it out for a token that "
            "lasts until revoked",
            field="expires_in_days",
            fix="give an expiry in the future, or none for a token that lasts until revoked",
        )


def _throttle_keys(username: str, address: str) -> list[str]:
    # The username bucket exists for unknown names too, so throttling tells nothing about
    # which accounts exist. No address would put every such client in one bucket.
    keys = [f"user:{username[:100]}"]
    if address:
        keys.append(f"addr:{credentials.address_bucket(address)}")
    return keys


class Accounts:
    """Users, sessions and API tokens in the event store's database."""

    def __init__(
        self,
        database: Database,
        settings: AccountSettings,
        hasher: argon2.PasswordHasher | None = None,
    ) -> None:
        self._database = database
        self._settings = settings
        self._passwords = credentials.PasswordHashing(hasher or settings.hasher())

    # Users

    def create_user(
        self, username: str, password: str, role: Role, *, now: datetime, by: Role | None = None
    ) -> User:
        """A new, enabled user; AccountExistsError if the name is taken in any case, and
        RoleTooHighError if ``role`` is above the asking credential's ``by``."""
        check_grant(by, Role(role), what="create a user with the role")
        name = validate_username(username)
        validate_password(password, username=name, min_length=self._settings.min_password_length)
        return self._insert_user(name, password, Role(role), now=now)

    def _insert_user(self, name: str, password: str, role: Role, *, now: datetime) -> User:
        at = _ms(now)
        user = User(id=uuid4(), username=name, role=role, disabled=False, created_at=_at(at))
        row = (str(user.id), name, self._passwords.hash(password), role.value, False, at, at, at)
        try:
            with self._database.transaction() as cursor:
                cursor.execute(
                    "INSERT INTO jobledger_users (id, username, password_hash, role, disabled, "
                    "created_at, updated_at, password_changed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
        except (sqlite3.IntegrityError, psycopg.IntegrityError):
            raise AccountExistsError from None
        log.info("accounts.user_created", username=name, role=role.value)
        return user

    def get_user(self, user_id: UUID) -> User | None:
        with self._database.transaction(snapshot=True) as cursor:
            return _fetch_user(cursor, user_id)

    def _require_user(self, user_id: UUID) -> User:
        user = self.get_user(user_id)
        if user is None:
            raise AccountNotFoundError
        return user

    def list_users(self) -> list[User]:
        with self._database.transaction(snapshot=True) as cursor:
            batches = list(cursor.stream(f"{_SELECT_USER} ORDER BY u.username"))
        return [_user(row) for batch in batches for row in batch]

    def update_user(
        self,
        user_id: UUID,
        *,
        role: Role | None = None,
        disabled: bool | None = None,
        password: str | None = None,
        keep_tokens: bool = False,
        now: datetime,
        by: Role | None = None,
    ) -> User:
        """Change a user. A new password ends the user's sessions and revokes its API
        tokens (``keep_tokens``: not the tokens); disabling ends the sessions and revokes
        the tokens (re-enabling restores neither).
        LastAdminError if it would leave no enabled admin; RoleTooHighError if the asking
        credential's ``by`` holds less than the user's role or the new one."""
        role = None if role is None else Role(role)
        if role is not None:
            check_grant(by, role, what="give the role")
        new_hash = self._checked_hash(user_id, password)
        with self._database.transaction() as cursor:
            user = _fetch_user(cursor, user_id)
            if user is None:
                raise AccountNotFoundError
            # A password reset or an enable hands out the user's rights too.
            check_grant(by, user.role, what="change a user who holds the role")
            if _removes_admin(user, role=role, disabled=disabled):
                _guard_last_admin(cursor, user.id)
            _apply_changes(
                cursor,
                user,
                role=role,
                disabled=disabled,
                password_hash=new_hash,
                keep_tokens=keep_tokens,
                at=_ms(now),
            )
        updated = msgspec.structs.replace(
            user,
            role=user.role if role is None else role,
            disabled=user.disabled if disabled is None else disabled,
        )
        log.info("accounts.user_updated", username=updated.username, role=updated.role.value)
        return updated

    def _checked_hash(self, user_id: UUID, password: str | None) -> str | None:
        # Hashed before the transaction: argon2 is slow on purpose, locks should not be.
        if password is None:
            return None
        user = self._require_user(user_id)
        min_length = self._settings.min_password_length
        validate_password(password, username=user.username, min_length=min_length)
        return self._passwords.hash(password)

    def delete_user(self, user_id: UUID, *, by: Role | None = None) -> None:
        """Delete a user with its sessions and tokens; LastAdminError for the last admin,
        RoleTooHighError if the asking credential's ``by`` holds less than the user."""
        uid = str(user_id)
        with self._database.transaction() as cursor:
            user = _fetch_user(cursor, user_id)
            if user is None:
                raise AccountNotFoundError
            check_grant(by, user.role, what="delete a user who holds the role")
            if user.role is Role.ADMIN and not user.disabled:
                _guard_last_admin(cursor, user.id)
            _end_sessions(cursor, user.id)
            cursor.execute("DELETE FROM jobledger_api_tokens WHERE user_id = ?", (uid,))
            cursor.execute("DELETE FROM jobledger_users WHERE id = ?", (uid,))
        log.info("accounts.user_deleted", username=user.username)

    def ensure_admin(
        self, username: str, password: str | None, *, production: bool, now: datetime
    ) -> tuple[User, bool]:
        """The first admin, created if no enabled admin exists: ``(user, created)``.

        The password is only needed to create it. It must be set in any mode; in
        production it must also meet the password rules (WeakAdminPasswordError). The
        API calls this as it starts, so the sign-in's dummy hash is made here too.
        """
        self._passwords.prepare()
        name = validate_username(username)
        existing = self._an_admin(name)
        if existing is not None:
            return existing, False
        checked = self._admin_password(name, password, production=production)
        try:
            return self._insert_user(name, checked, Role.ADMIN, now=now), True
        except AccountExistsError:
            return self._admin_created_meanwhile(name), False

    def _an_admin(self, name: str) -> User | None:
        """An enabled admin: the one called ``name`` if it is one, else the oldest."""
        sql = (
            f"{_SELECT_USER} WHERE u.role = 'admin' AND NOT u.disabled "
            "ORDER BY CASE WHEN u.username = ? THEN 0 ELSE 1 END, u.created_at, u.id LIMIT 1"
        )
        with self._database.transaction(snapshot=True) as cursor:
            row = cursor.execute(sql, (name,)).fetchone()
        return None if row is None else _user(row)

    def _admin_password(self, name: str, password: str | None, *, production: bool) -> str:
        variable = f"{PREFIX}ADMIN_PASSWORD"
        min_length = self._settings.min_password_length
        if not password:
            raise WeakAdminPasswordError(
                f"no admin exists yet and {variable} is not set; set {variable} (or "
                f"ADMIN_PASSWORD) to the first admin's password, {min_length} characters or more"
            )
        problem = credentials.password_problem(password, username=name, min_length=min_length)
        if production and problem is not None:
            raise WeakAdminPasswordError(
                f"{variable} is too weak for production: {problem}; "
                f"change {variable}, or use {PREFIX}MODE=dev on a development machine"
            )
        return password

    def _admin_created_meanwhile(self, name: str) -> User:
        # Another process may have created the admin between the check and the insert.
        admin = self._an_admin(name)
        if admin is None:
            raise AccountExistsError(
                f"user {name!r} exists but is not an enabled admin, and no admin exists; "
                f"set {PREFIX}ADMIN_USERNAME to another name"
            )
        return admin

    # Login and sessions

    def login(
        self, username: str, password: str, *, address: str, now: datetime
    ) -> tuple[User, SessionTicket]:
        """A new session. InvalidCredentialsError is the same for an unknown user, a
        wrong password and a disabled account; LoginThrottledError comes before any
        password check.

        Each attempt is reserved in the throttle buckets before its password is checked,
        as a failure, atomically with the count that admits it: however many requests
        arrive at once, no more than the limit get a password check. A success takes its
        reservation back."""
        name = username.lower()
        keys = _throttle_keys(name, address)
        retry_after, row = self._reserve_attempt(keys, name, now)
        if retry_after is not None:
            log.warning("accounts.login_throttled", username=name, address=address)
            raise LoginThrottledError(retry_after)
        stored = None if row is None else str(row[5])
        verified = self._passwords.verify(stored, password)
        if not verified or stored is None or row is None or row[3]:
            log.warning("accounts.login_failed", username=name, address=address)
            raise InvalidCredentialsError
        user = _user(row)
        ticket = self._open_session(user, stored, password, keys, now)
        log.info("accounts.login", username=name, address=address)
        return user, ticket

    def _reserve_attempt(
        self, keys: list[str], name: str, now: datetime
    ) -> tuple[timedelta | None, Sequence[Any] | None]:
        """``(None, the user's row or None if unknown)`` once an attempt is booked in
        every bucket; ``(the wait, None)``, booking nothing, if a bucket is full."""
        at, row = _ms(now), None
        with self._database.transaction() as cursor:
            # One short lock for every reservation (the store's single row exists on both
            # backends; SQLite serialises writers anyway): the count and the booking are
            # one step, so parallel attempts are counted one after the other.
            cursor.execute(_LOCK_THROTTLE)
            retry_after = self._retry_after(cursor, keys, now)
            if retry_after is None:
                cursor.executemany(_RECORD_FAILURE, [(key, at) for key in keys])
                cutoff = at - self._settings.throttle_window // _MS
                cursor.execute("DELETE FROM jobledger_login_failures WHERE at_ms <= ?", (cutoff,))
                row = cursor.execute(_LOGIN_USER, (name,)).fetchone()
        return retry_after, cast("Sequence[Any] | None", row)

    def _retry_after(self, cursor: Cursor, keys: list[str], now: datetime) -> timedelta | None:
        window = self._settings.throttle_window // _MS
        at = _ms(now)
        params = [(key, at - window, self._settings.throttle_max_failures - 1) for key in keys]
        rows = [cursor.execute(_NTH_FAILURE, p).fetchone() for p in params]
        waits = [row[0] + window - at for row in rows if row is not None]
        return max(waits) * _MS if waits else None

    def _open_session(
        self, user: User, stored: str, password: str, keys: list[str], now: datetime
    ) -> SessionTicket:
        at = _ms(now)
        expires = at + self._settings.session_absolute // _MS
        ticket = SessionTicket(
            token=credentials.new_secret(),
            csrf_token=credentials.new_secret(),
            expires_at=_at(expires),
        )
        session = (credentials.token_digest(ticket.token), ticket.csrf_token, at, at, expires)
        rehashed = self._passwords.rehashed(stored, password)
        with self._database.transaction() as cursor:
            if cursor.execute(_INSERT_SESSION, (*session, str(user.id), stored)).rowcount != 1:
                raise InvalidCredentialsError
            # The account's whole bucket, but of the address's only this attempt's booking:
            # clearing its failures would let one known password buy unlimited guesses at
            # other accounts.
            cursor.execute("DELETE FROM jobledger_login_failures WHERE key = ?", (keys[0],))
            for key in keys[1:]:
                cursor.execute(_RELEASE_RESERVATION, (key, at))
            cursor.execute("DELETE FROM jobledger_sessions WHERE expires_at <= ?", (at,))
            if rehashed is not None:
                cursor.execute(_REHASH, (rehashed, str(user.id), stored))
        return ticket

    def resolve_session(self, token: str, *, now: datetime) -> tuple[Principal, str] | None:
        """``(principal, csrf_token)`` of a live session; None if unknown or expired
        (idle or absolute), and an expired session is deleted."""
        digest = credentials.token_digest(token)
        with self._database.transaction(snapshot=True) as cursor:
            row = cursor.execute(_SESSION_OF, (digest,)).fetchone()
        if row is None:
            return None
        user, csrf_token, last_seen, expires = _user(row), row[5], row[6], row[7]
        at = _ms(now)
        idle = self._settings.session_idle // _MS
        if user.disabled or at >= expires or at - last_seen >= idle:
            self._delete_session(digest)
            return None
        if at - last_seen >= TOUCH_EVERY // _MS:
            self._touch(_TOUCH_SESSION, digest, at)
        return Principal(user=user, role=user.role, via="session"), csrf_token

    def _touch(self, sql: str, digest: str, at: int) -> None:
        with self._database.transaction() as cursor:
            cursor.execute(sql, (at, digest, at))

    def logout(self, token: str) -> None:
        self._delete_session(credentials.token_digest(token))

    def _delete_session(self, digest: str) -> None:
        with self._database.transaction() as cursor:
            cursor.execute("DELETE FROM jobledger_sessions WHERE id = ?", (digest,))

    # API tokens

    def create_token(
        self,
        user_id: UUID,
        name: str,
        role: Role,
        *,
        expires_at: datetime | None,
        now: datetime,
        by: Role | None = None,
        parent_id: UUID | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token and its plaintext, which is shown once and never stored. Its role
        is at most its user's and at most the asking credential's ``by``; minted by the
        token ``parent_id``, it expires no later than that one, and goes when it goes."""
        role, name = Role(role), name.strip()
        _check_token_spec(name, expires_at, now)
        check_grant(by, role, what="create a token with the role")
        user = self._require_user(user_id)
        check_grant(user.role, role, what="have a token with the role", holder="the user")
        plaintext = credentials.new_api_token()
        token = ApiToken(
            id=uuid4(),
            name=name,
            role=role,
            user_id=user.id,
            created_at=_at(_ms(now)),
            expires_at=None if expires_at is None else _at(_ms(expires_at)),
            revoked_at=None,
            last_used_at=None,
        )
        token = self._insert_token(token, credentials.token_digest(plaintext), parent_id)
        log.info("accounts.token_created", username=user.username, name=name, role=role.value)
        return token, plaintext

    def _insert_token(self, token: ApiToken, digest: str, parent_id: UUID | None) -> ApiToken:
        """Insert ``token``; under a parent, with the parent's expiry if that is sooner."""
        with self._database.transaction() as cursor:
            if parent_id is not None:
                token = _under_parent(cursor, token, parent_id)
            expires = None if token.expires_at is None else _ms(token.expires_at)
            row = (str(token.id), token.name, digest, str(token.user_id), token.role.value)
            parent = None if parent_id is None else str(parent_id)
            cursor.execute(
                "INSERT INTO jobledger_api_tokens (id, name, token_hash, user_id, role, "
                "created_at, expires_at, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*row, _ms(token.created_at), expires, parent),
            )
        return token

    def resolve_token(self, plaintext: str, *, now: datetime) -> Principal | None:
        """The principal of a live token; None if unknown, revoked, expired or its user
        is disabled. Its role is capped at the user's current role."""
        if not plaintext.startswith(credentials.API_TOKEN_PREFIX):
            return None
        digest = credentials.token_digest(plaintext)
        with self._database.transaction(snapshot=True) as cursor:
            row = cursor.execute(_API_KEY_OF, (digest,)).fetchone()
        if row is None:
            return None
        user, role = _user(row), Role(row[5])
        expires, revoked, last_used = row[6], row[7], row[8]
        at = _ms(now)
        if user.disabled or revoked is not None or (expires is not None and at >= expires):
            return None
        if last_used is None or at - last_used >= TOUCH_EVERY // _MS:
            self._touch(_TOUCH_API_KEY, digest, at)
        return Principal(
            user=user,
            role=_capped(role, user.role),
            via="token",
            token_name=row[9],
            token_id=UUID(row[10]),
        )

    def list_tokens(self, user_id: UUID | None = None) -> list[ApiToken]:
        sql, params = _SELECT_TOKENS, tuple[str, ...]()
        if user_id is not None:
            sql, params = f"{sql} WHERE user_id = ?", (str(user_id),)
        with self._database.transaction(snapshot=True) as cursor:
            batches = list(cursor.stream(f"{sql} ORDER BY created_at, id", params))
        return [_token(row) for batch in batches for row in batch]

    def revoke_token(self, token_id: UUID, *, now: datetime) -> None:
        """Revoke a token and every token minted from it, down the tree (again: no
        change); TokenNotFoundError if there is none."""
        tid = str(token_id)
        with self._database.transaction() as cursor:
            found = cursor.execute("SELECT 1 FROM jobledger_api_tokens WHERE id = ?", (tid,))
            if found.fetchone() is None:
                raise TokenNotFoundError
            # First the token itself, in its own statement: a mint from it waits for
            # this (see _under_parent), and the next statement sees that mint's child.
            cursor.execute(
                "UPDATE jobledger_api_tokens SET revoked_at = ? "
                "WHERE id = ? AND revoked_at IS NULL",
                (_ms(now), tid),
            )
            cursor.execute(_REVOKE_DESCENDANTS, (tid, _ms(now)))
        log.info("accounts.token_revoked", id=tid)
