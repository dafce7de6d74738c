"""Accounts for the REST API: users, server-side sessions, API tokens, login throttling.

Accounts are plain tables beside the event log, not events (ADR 13), reached through
the account store (``account_store.AccountStore``). Every method that depends on the
time takes ``now``; nothing here reads the clock. Passwords and tokens are
never logged: log lines name the username and the client address only.
"""

from datetime import datetime, timedelta
from typing import Self
from uuid import UUID, uuid4

import argon2
import msgspec
import structlog

from jobledger.domain.roles import Role
from jobledger.infra import credentials
from jobledger.infra.accounts import (
    ApiToken,
    NewSession,
    SignIn,
    StoredKey,
    User,
    from_millis,
    millis,
)
from jobledger.infra.errors import RuntimeLayerError
from jobledger.infra.settings import PREFIX, Settings
from jobledger.services.account_store import AccountStore, AccountTransaction
from jobledger.services.recent_keys import RecentKeys

log = structlog.get_logger(__name__)

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


def _stored(moment: datetime) -> datetime:
    """``moment`` as the tables keep it: to the millisecond, rounded down."""
    return from_millis(millis(moment))


def _expired(expires_at: datetime | None, at: int) -> bool:
    return expires_at is not None and at >= millis(expires_at)


def _guard_last_admin(tx: AccountTransaction, user_id: UUID) -> None:
    """LastAdminError unless an enabled admin other than ``user_id`` remains."""
    if tx.enabled_admins_besides(user_id) == 0:
        raise LastAdminError


def _removes_admin(user: User, *, role: Role | None, disabled: bool | None) -> bool:
    if user.role is not Role.ADMIN or user.disabled:
        return False
    return disabled is True or (role is not None and role is not Role.ADMIN)


def _apply_changes(
    tx: AccountTransaction,
    user: User,
    *,
    role: Role | None,
    disabled: bool | None,
    password_hash: str | None,
    keep_tokens: bool,
    at: datetime,
) -> None:
    if role is not None:
        tx.set_role(user.id, role)
    if disabled is not None:
        tx.set_disabled(user.id, disabled=disabled)
    if password_hash is not None:
        tx.set_password(user.id, password_hash, at=at)
    # A new password or a disabled account ends the sessions that the old state opened.
    if disabled or password_hash is not None:
        tx.end_sessions(user.id)
    # A reset password is often a stolen one: what it may have minted goes with it.
    if disabled or (password_hash is not None and not keep_tokens):
        tx.revoke_tokens(user.id, at=at)
    tx.mark_updated(user.id, at=at)


def _under_parent(tx: AccountTransaction, token: ApiToken, parent_id: UUID) -> ApiToken:
    """``token`` as its live parent lets it be: expiring no later. The parent's row is
    locked first, so a revocation of the parent either waits for this mint (and then
    revokes the child too) or comes first (and this mint is refused)."""
    parent = tx.lock_token(parent_id)
    if parent is None or parent.revoked_at is not None:
        raise TokenNotFoundError("the token that asks was revoked meanwhile; use a live one")
    ceiling = parent.expires_at
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


def _live(found: StoredKey, at: int) -> bool:
    token = found.token
    return not (
        found.user.disabled or token.revoked_at is not None or _expired(token.expires_at, at)
    )


def _touch_due(found: StoredKey, at: int) -> bool:
    last_used = found.token.last_used_at
    return last_used is None or at - millis(last_used) >= TOUCH_EVERY // _MS


def _token_principal(found: StoredKey) -> Principal:
    user, token = found.user, found.token
    return Principal(
        user=user,
        role=_capped(token.role, user.role),
        via="token",
        token_name=token.name,
        token_id=token.id,
    )


def _throttle_keys(username: str, address: str) -> list[str]:
    # The username bucket exists for unknown names too, so throttling tells nothing about
    # which accounts exist. No address would put every such client in one bucket.
    keys = [f"user:{username[:100]}"]
    if address:
        keys.append(f"addr:{credentials.address_bucket(address)}")
    return keys


class Accounts:
    """Users, sessions and API tokens, kept in ``store``."""

    def __init__(
        self,
        store: AccountStore,
        settings: AccountSettings,
        hasher: argon2.PasswordHasher | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._passwords = credentials.PasswordHashing(hasher or settings.hasher())
        self._keys = RecentKeys()

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
        user = User(id=uuid4(), username=name, role=role, disabled=False, created_at=_stored(now))
        if not self._store.insert_user(user, self._passwords.hash(password)):
            raise AccountExistsError
        log.info("accounts.user_created", username=name, role=role.value)
        return user

    def get_user(self, user_id: UUID) -> User | None:
        return self._store.find_user(user_id)

    def _require_user(self, user_id: UUID) -> User:
        user = self.get_user(user_id)
        if user is None:
            raise AccountNotFoundError
        return user

    def list_users(self) -> list[User]:
        return self._store.list_users()

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
        with self._store.transaction() as tx:
            user = tx.find_user(user_id)
            if user is None:
                raise AccountNotFoundError
            # A password reset or an enable hands out the user's rights too.
            check_grant(by, user.role, what="change a user who holds the role")
            if _removes_admin(user, role=role, disabled=disabled):
                _guard_last_admin(tx, user.id)
            _apply_changes(
                tx,
                user,
                role=role,
                disabled=disabled,
                password_hash=new_hash,
                keep_tokens=keep_tokens,
                at=now,
            )
        self._keys.forget()
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
        with self._store.transaction() as tx:
            user = tx.find_user(user_id)
            if user is None:
                raise AccountNotFoundError
            check_grant(by, user.role, what="delete a user who holds the role")
            if user.role is Role.ADMIN and not user.disabled:
                _guard_last_admin(tx, user.id)
            tx.end_sessions(user.id)
            tx.delete_user(user.id)
        self._keys.forget()
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
        existing = self._store.an_admin(name)
        if existing is not None:
            return existing, False
        checked = self._admin_password(name, password, production=production)
        try:
            return self._insert_user(name, checked, Role.ADMIN, now=now), True
        except AccountExistsError:
            return self._admin_created_meanwhile(name), False

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
        admin = self._store.an_admin(name)
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
        retry_after, found = self._reserve_attempt(keys, name, now)
        if retry_after is not None:
            log.warning("accounts.login_throttled", username=name, address=address)
            raise LoginThrottledError(retry_after)
        stored = None if found is None else found.password_hash
        verified = self._passwords.verify(stored, password)
        if not verified or found is None or found.user.disabled:
            log.warning("accounts.login_failed", username=name, address=address)
            raise InvalidCredentialsError
        user = found.user
        ticket = self._open_session(user, found.password_hash, password, keys, now)
        log.info("accounts.login", username=name, address=address)
        return user, ticket

    def _reserve_attempt(
        self, keys: list[str], name: str, now: datetime
    ) -> tuple[timedelta | None, SignIn | None]:
        """``(None, the user or None if unknown)`` once an attempt is booked in every
        bucket; ``(the wait, None)``, booking nothing, if a bucket is full."""
        found = None
        with self._store.transaction() as tx:
            # One short lock for every reservation: the count and the booking are one
            # step, so parallel attempts are counted one after the other.
            tx.lock_throttle()
            retry_after = self._retry_after(tx, keys, now)
            if retry_after is None:
                tx.record_failures(keys, at=now)
                window = self._settings.throttle_window // _MS
                tx.forget_failures(up_to=from_millis(millis(now) - window))
                found = tx.sign_in(name)
        return retry_after, found

    def _retry_after(
        self, tx: AccountTransaction, keys: list[str], now: datetime
    ) -> timedelta | None:
        # The max-th most recent failure inside the window: while it exists, the bucket
        # is full, and it leaves the window exactly when one more attempt is allowed.
        window = self._settings.throttle_window // _MS
        at = millis(now)
        after, offset = from_millis(at - window), self._settings.throttle_max_failures - 1
        found = [tx.nth_failure(key, after=after, offset=offset) for key in keys]
        waits = [millis(failure) + window - at for failure in found if failure is not None]
        return max(waits) * _MS if waits else None

    def _open_session(
        self, user: User, stored: str, password: str, keys: list[str], now: datetime
    ) -> SessionTicket:
        at = millis(now)
        expires = from_millis(at + self._settings.session_absolute // _MS)
        ticket = SessionTicket(
            token=credentials.new_secret(),
            csrf_token=credentials.new_secret(),
            expires_at=expires,
        )
        digest = credentials.token_digest(ticket.token)
        session = NewSession(
            digest, ticket.csrf_token, created_at=from_millis(at), expires_at=expires
        )
        rehashed = self._passwords.rehashed(stored, password)
        with self._store.transaction() as tx:
            if not tx.insert_session(session, user.id, stored):
                raise InvalidCredentialsError
            # The account's whole bucket, but of the address's only this attempt's booking:
            # clearing its failures would let one known password buy unlimited guesses at
            # other accounts.
            tx.clear_failures(keys[0])
            for key in keys[1:]:
                tx.release_failure(key, at=now)
            tx.end_expired_sessions(at=now)
            if rehashed is not None:
                tx.rehash(user.id, rehashed, replacing=stored)
        return ticket

    def resolve_session(self, token: str, *, now: datetime) -> tuple[Principal, str] | None:
        """``(principal, csrf_token)`` of a live session; None if unknown or expired
        (idle or absolute), and an expired session is deleted."""
        digest = credentials.token_digest(token)
        found = self._store.find_session(digest)
        if found is None:
            return None
        user = found.user
        last_seen, expires = millis(found.last_seen_at), millis(found.expires_at)
        at = millis(now)
        idle = self._settings.session_idle // _MS
        if user.disabled or at >= expires or at - last_seen >= idle:
            self._store.delete_session(digest)
            return None
        if at - last_seen >= TOUCH_EVERY // _MS:
            self._store.touch_session(digest, at=now)
        return Principal(user=user, role=user.role, via="session"), found.csrf_token

    def logout(self, token: str) -> None:
        self._store.delete_session(credentials.token_digest(token))

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
            created_at=_stored(now),
            expires_at=None if expires_at is None else _stored(expires_at),
            revoked_at=None,
            last_used_at=None,
        )
        token = self._insert_token(token, credentials.token_digest(plaintext), parent_id)
        log.info("accounts.token_created", username=user.username, name=name, role=role.value)
        return token, plaintext

    def _insert_token(self, token: ApiToken, digest: str, parent_id: UUID | None) -> ApiToken:
        """Insert ``token``; under a parent, with the parent's expiry if that is sooner."""
        with self._store.transaction() as tx:
            if parent_id is not None:
                token = _under_parent(tx, token, parent_id)
            tx.insert_token(token, digest, parent_id=parent_id)
        return token

    def resolve_token(self, plaintext: str, *, now: datetime) -> Principal | None:
        """The principal of a live token; None if unknown, revoked, expired or its user
        is disabled. Its role is capped at the user's current role. What the table said
        is kept for a moment (``recent_keys``, ADR 103)."""
        if not plaintext.startswith(credentials.API_TOKEN_PREFIX):
            return None
        digest, at = credentials.token_digest(plaintext), millis(now)
        found = self._keys.get(digest, at_ms=at)
        if found is None:
            generation = self._keys.generation
            found = self._store.find_key(digest)
            if found is None:
                return None
            self._keys.put(digest, found, read_ms=at, generation=generation)
        if not _live(found, at):
            return None
        if _touch_due(found, at):
            self._store.touch_key(digest, at=now)
            touched = msgspec.structs.replace(found.token, last_used_at=_stored(now))
            self._keys.replace(digest, msgspec.structs.replace(found, token=touched))
        return _token_principal(found)

    def recent_token(self, plaintext: str, *, now: datetime) -> Principal | None:
        """The principal of a live token this process read a moment ago and need not
        touch now: an answer without input or output, for the event loop. None means
        ask ``resolve_token``."""
        if not plaintext.startswith(credentials.API_TOKEN_PREFIX):
            return None
        at = millis(now)
        found = self._keys.get(credentials.token_digest(plaintext), at_ms=at)
        if found is None or not _live(found, at) or _touch_due(found, at):
            return None
        return _token_principal(found)

    def list_tokens(self, user_id: UUID | None = None) -> list[ApiToken]:
        return self._store.list_tokens(user_id)

    def revoke_token(self, token_id: UUID, *, now: datetime) -> None:
        """Revoke a token and every token minted from it, down the tree (again: no
        change); TokenNotFoundError if there is none."""
        revoked = self._store.revoke_token(token_id, at=now)
        self._keys.forget()
        if not revoked:
            raise TokenNotFoundError
        log.info("accounts.token_revoked", id=str(token_id))
