"""Accounts on PostgreSQL and SQLite: users, sessions, throttling, API tokens, the admin."""

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Literal

import argon2
import pytest

from jobledger.adapters.sql.accounts import SqlAccountStore
from jobledger.adapters.store import projection_database
from jobledger.bootstrap import bootstrap
from jobledger.domain.roles import Role
from jobledger.infra.accounts import User
from jobledger.infra.settings import Settings
from jobledger.projections.database import Database
from jobledger.services.identities import (
    AccountExistsError,
    AccountNotFoundError,
    Accounts,
    AccountSettings,
    InvalidCredentialsError,
    InvalidPasswordError,
    InvalidTokenSpecError,
    LastAdminError,
    LoginThrottledError,
    RoleTooHighError,
    TokenNotFoundError,
    WeakAdminPasswordError,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
PASSWORD = "correct horse battery"
WRONG = "wrong horse battery"
ACCOUNT_TABLES = (
    "jobledger_users",
    "jobledger_sessions",
    "jobledger_api_tokens",
    "jobledger_login_failures",
)


class CountingHasher(argon2.PasswordHasher):
    """Cheap parameters, and a count of the hashes and verifications it made."""

    def __init__(self, time_cost: int = 1) -> None:
        super().__init__(time_cost=time_cost, memory_cost=8, parallelism=1)
        self.verified = self.hashed = 0

    def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
        self.hashed += 1
        return super().hash(password, salt=salt)

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:  # noqa: A002 (the base class's name)
        self.verified += 1
        return super().verify(hash, password)


@pytest.fixture
def database(store_settings: Settings) -> Iterator[Database]:
    opened = projection_database(store_settings)
    yield opened
    opened.close()


@pytest.fixture
def hasher() -> CountingHasher:
    return CountingHasher()


@pytest.fixture
def accounts(database: Database, hasher: CountingHasher) -> Accounts:
    return Accounts(SqlAccountStore(database), AccountSettings(), hasher=hasher)


def make_user(accounts: Accounts, name: str = "alice", role: Role = Role.OPERATOR) -> User:
    return accounts.create_user(name, PASSWORD, role, now=T0)


def rows(database: Database, sql: str) -> list[tuple[object, ...]]:
    with database.transaction(snapshot=True) as cursor:
        return [tuple(row) for batch in cursor.stream(sql) for row in batch]


def table_rows(database: Database, table: str) -> list[tuple[object, ...]]:
    return rows(database, f"SELECT * FROM {table}")  # noqa: S608 (a constant table name)


def fail_logins(accounts: Accounts, username: str, count: int, *, address: str = "") -> None:
    for i in range(count):
        with pytest.raises(InvalidCredentialsError):
            accounts.login(
                username,
                WRONG,
                address=address or f"10.0.0.{i}",
                now=T0 + timedelta(seconds=i),
            )


# Users, login and sessions


def test_create_login_resolve_logout(accounts: Accounts) -> None:
    """If a user is created and logs in, then the session resolves to that user with its
    role and CSRF token until logout, after which it resolves to nothing."""
    user = accounts.create_user("Alice", PASSWORD, Role.OPERATOR, now=T0)
    assert user.username == "alice"
    assert accounts.get_user(user.id) == user
    assert accounts.list_users() == [user]
    same, ticket = accounts.login("ALICE", PASSWORD, address="192.0.2.1", now=T0)
    assert same == user
    assert ticket.expires_at == T0 + timedelta(hours=12)
    resolved = accounts.resolve_session(ticket.token, now=T0 + timedelta(minutes=1))
    assert resolved is not None
    principal, csrf_token = resolved
    assert (principal.user, principal.role, principal.via) == (user, Role.OPERATOR, "session")
    assert csrf_token == ticket.csrf_token
    accounts.logout(ticket.token)
    assert accounts.resolve_session(ticket.token, now=T0 + timedelta(minutes=2)) is None


def test_usernames_are_unique_in_any_case(accounts: Accounts) -> None:
    """If a username is taken in another case, then creating it again is refused."""
    make_user(accounts, "alice")
    with pytest.raises(AccountExistsError, match="choose another username"):
        accounts.create_user("ALICE", PASSWORD, Role.VIEWER, now=T0)


def test_a_weak_password_is_refused_with_its_rule(accounts: Accounts) -> None:
    """If a new user's password is too short, then nothing is created and the error says
    how long it must be."""
    with pytest.raises(InvalidPasswordError, match="use at least 12"):
        accounts.create_user("alice", "short", Role.VIEWER, now=T0)
    assert accounts.list_users() == []


def test_every_login_is_a_new_session(accounts: Accounts) -> None:
    """If a user logs in twice, then each login gets its own token and CSRF token, and a
    logout ends only the session it names."""
    make_user(accounts)
    _, first = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    _, second = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    assert first.token != second.token
    assert first.csrf_token != second.csrf_token
    accounts.logout(first.token)
    assert accounts.resolve_session(first.token, now=T0) is None
    assert accounts.resolve_session(second.token, now=T0) is not None


def test_an_idle_session_expires_and_is_deleted(accounts: Accounts, database: Database) -> None:
    """If a session is used within the idle timeout, then it lives on; if it is left idle
    for 30 minutes, then it resolves to nothing and its row is gone."""
    make_user(accounts)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    used = T0 + timedelta(minutes=29)
    assert accounts.resolve_session(ticket.token, now=used) is not None
    assert accounts.resolve_session(ticket.token, now=used + timedelta(minutes=29)) is not None
    idle = used + timedelta(minutes=29 + 30)
    assert accounts.resolve_session(ticket.token, now=idle) is None
    assert rows(database, "SELECT id FROM jobledger_sessions") == []


def test_last_seen_is_written_at_most_once_a_minute(accounts: Accounts, database: Database) -> None:
    """If a session is used several times within a minute, then its last_seen_at is only
    written again after a minute."""
    make_user(accounts)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    seen = "SELECT last_seen_at FROM jobledger_sessions"
    start = rows(database, seen)
    for seconds in (1, 30, 59):
        accounts.resolve_session(ticket.token, now=T0 + timedelta(seconds=seconds))
    assert rows(database, seen) == start
    accounts.resolve_session(ticket.token, now=T0 + timedelta(seconds=61))
    assert rows(database, seen) != start


def test_a_session_ends_at_its_absolute_expiry_however_busy(accounts: Accounts) -> None:
    """If a session is used every 20 minutes, then it still ends 12 hours after login."""
    make_user(accounts)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    moment = T0
    while moment < T0 + timedelta(hours=12) - timedelta(minutes=20):
        moment += timedelta(minutes=20)
        assert accounts.resolve_session(ticket.token, now=moment) is not None
    assert accounts.resolve_session(ticket.token, now=T0 + timedelta(hours=12)) is None


def test_unknown_user_and_wrong_password_look_the_same(
    accounts: Accounts, hasher: CountingHasher
) -> None:
    """If the username is unknown or the password wrong, then the error is the same and a
    hash is verified in both cases (so the time taken tells nothing either)."""
    make_user(accounts)
    before = hasher.verified
    with pytest.raises(InvalidCredentialsError) as unknown:
        accounts.login("mallory", PASSWORD, address="192.0.2.1", now=T0)
    with pytest.raises(InvalidCredentialsError) as wrong:
        accounts.login("alice", WRONG, address="192.0.2.1", now=T0)
    assert str(unknown.value) == str(wrong.value) == "Unknown username or wrong password."
    assert hasher.verified == before + 2


def test_a_disabled_user_cannot_log_in(accounts: Accounts) -> None:
    """If a user is disabled, then even the right password gets the same refusal."""
    user = make_user(accounts)
    accounts.update_user(user.id, disabled=True, now=T0)
    with pytest.raises(InvalidCredentialsError, match="Unknown username or wrong password"):
        accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)


# Throttling


def test_an_account_is_throttled_after_five_failures(accounts: Accounts) -> None:
    """If an account has 5 failed logins within 15 minutes (from any addresses), then the
    next login is refused with the time left, even with the right password, until the
    oldest failure leaves the window."""
    make_user(accounts)
    fail_logins(accounts, "alice", 5)
    now = T0 + timedelta(minutes=5)
    with pytest.raises(LoginThrottledError) as throttled:
        accounts.login("alice", PASSWORD, address="198.51.100.7", now=now)
    assert throttled.value.retry_after == timedelta(minutes=10)
    user, _ = accounts.login(
        "alice", PASSWORD, address="198.51.100.7", now=T0 + timedelta(minutes=15)
    )
    assert user.username == "alice"


def test_an_address_is_throttled_across_accounts(accounts: Accounts) -> None:
    """If one address fails 5 times on any usernames, then it is throttled for every
    account, while other addresses still log in."""
    make_user(accounts)
    for i in range(5):
        with pytest.raises(InvalidCredentialsError):
            accounts.login(f"guess{i}", WRONG, address="203.0.113.9", now=T0)
    with pytest.raises(LoginThrottledError):
        accounts.login("alice", PASSWORD, address="203.0.113.9", now=T0)
    assert accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)[0].username == "alice"


def test_an_ipv6_slash_64_is_throttled_as_one_address(accounts: Accounts) -> None:
    """If 5 addresses of one IPv6 /64 each fail once, on any usernames, then a sixth
    address of that /64 is throttled, while an address of the next /64 still signs
    in."""
    make_user(accounts)
    for i in range(5):
        with pytest.raises(InvalidCredentialsError):
            accounts.login(f"guess{i}", WRONG, address=f"2001:db8:7:1::{i + 1:x}", now=T0)
    with pytest.raises(LoginThrottledError):
        accounts.login("alice", PASSWORD, address="2001:db8:7:1:abcd::1", now=T0)
    assert accounts.login("alice", PASSWORD, address="2001:db8:7:2::1", now=T0)[0].username == (
        "alice"
    )


def test_a_success_resets_the_account_but_not_the_address(accounts: Accounts) -> None:
    """If an account logs in after 4 failures, then its count starts again (4 more
    failures do not throttle it), but the failures of the address still count."""
    make_user(accounts)
    fail_logins(accounts, "alice", 4)
    accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0 + timedelta(seconds=10))
    fail_logins(accounts, "alice", 4)
    accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0 + timedelta(seconds=20))
    fail_logins(accounts, "mallory", 4, address="203.0.113.9")
    accounts.login("alice", PASSWORD, address="203.0.113.9", now=T0 + timedelta(seconds=30))
    with pytest.raises(InvalidCredentialsError):
        accounts.login("bob", WRONG, address="203.0.113.9", now=T0 + timedelta(seconds=31))
    with pytest.raises(LoginThrottledError):
        accounts.login("alice", PASSWORD, address="203.0.113.9", now=T0 + timedelta(seconds=32))


def test_a_throttled_login_verifies_no_password(accounts: Accounts, hasher: CountingHasher) -> None:
    """If a login is throttled, then no password hash is verified for it."""
    make_user(accounts)
    fail_logins(accounts, "alice", 5)
    before = hasher.verified
    for _ in range(3):
        with pytest.raises(LoginThrottledError):
            accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0 + timedelta(minutes=1))
    assert hasher.verified == before


class SlowCountingHasher(CountingHasher):
    """Counts verifications across threads; each takes a while, as a real one does."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:  # noqa: A002 (the base class's name)
        with self._lock:
            self.verified += 1
        time.sleep(0.05)
        return argon2.PasswordHasher.verify(self, hash, password)


def test_only_the_api_start_and_sign_in_make_a_hash(
    accounts: Accounts, hasher: CountingHasher
) -> None:
    """If accounts are set up (every role that builds the use cases does), then no
    argon2 hash is made (each takes 64 MiB while it runs); the API's start makes the
    dummy hash for unknown usernames once, and a sign-in of an unknown name makes none."""
    assert hasher.hashed == 0
    accounts.ensure_admin("admin", PASSWORD, production=False, now=T0)
    assert hasher.hashed == 2  # the dummy, and the admin's password
    with pytest.raises(InvalidCredentialsError):
        accounts.login("nobody", PASSWORD, address="192.0.2.1", now=T0)
    assert (hasher.hashed, hasher.verified) == (2, 1)


def test_an_unknown_name_is_checked_against_a_dummy_made_on_first_use(
    database: Database,
) -> None:
    """If a process signs in an unknown name before the dummy hash was made, then the
    dummy is made then, and the name is refused."""
    hasher = CountingHasher()
    accounts = Accounts(SqlAccountStore(database), AccountSettings(), hasher=hasher)
    with pytest.raises(InvalidCredentialsError):
        accounts.login("nobody", PASSWORD, address="192.0.2.1", now=T0)
    assert (hasher.hashed, hasher.verified) == (1, 1)


def test_concurrent_guesses_get_no_more_checks_than_the_limit(database: Database) -> None:
    """If 16 wrong passwords for one account arrive at once (each from its own address),
    then at most 5 passwords are verified and the rest are throttled: each attempt is
    booked before its password is checked."""
    hasher = SlowCountingHasher()
    accounts = Accounts(SqlAccountStore(database), AccountSettings(), hasher=hasher)
    make_user(accounts)
    hasher.verified = 0
    start = threading.Barrier(16)

    def guess(n: int) -> str:
        start.wait()
        try:
            accounts.login("alice", WRONG, address=f"203.0.113.{n}", now=T0)
        except LoginThrottledError:
            return "throttled"
        except InvalidCredentialsError:
            return "refused"
        return "signed in"

    with ThreadPoolExecutor(16) as pool:
        outcomes = sorted(pool.map(guess, range(16)))
    assert hasher.verified == 5
    assert outcomes == ["refused"] * 5 + ["throttled"] * 11


def test_a_success_gives_its_booking_back(accounts: Accounts) -> None:
    """If an address signs in successfully 5 times, then it is not throttled: a success
    does not count as a failure of its address."""
    make_user(accounts)
    for second in range(6):
        at = T0 + timedelta(seconds=second)
        accounts.login("alice", PASSWORD, address="192.0.2.1", now=at)
    with pytest.raises(InvalidCredentialsError):
        accounts.login("alice", WRONG, address="192.0.2.1", now=T0 + timedelta(seconds=7))


def test_a_login_renews_a_hash_made_with_weaker_parameters(
    accounts: Accounts, database: Database
) -> None:
    """If the hasher's parameters grew since the password was hashed, then a successful
    login stores a new hash with the new parameters, and the password still works."""
    make_user(accounts)
    stronger = Accounts(
        SqlAccountStore(database), AccountSettings(), hasher=CountingHasher(time_cost=2)
    )
    stronger.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    [(stored,)] = rows(database, "SELECT password_hash FROM jobledger_users")
    assert isinstance(stored, str)
    assert stored.startswith("$argon2id$")
    assert ",t=2," in stored
    assert stronger.login("alice", PASSWORD, address="192.0.2.1", now=T0)[0].username == "alice"


# Changing and deleting users


def test_a_new_password_ends_sessions_and_tokens_unless_kept(accounts: Accounts) -> None:
    """If a user's password changes, then its sessions end and its API tokens are
    revoked, unless the tokens are kept; only the new password logs in."""
    user = make_user(accounts)
    old = PASSWORD
    for keep, new in ((False, "a brand new passphrase"), (True, "another new passphrase")):
        _, ticket = accounts.login("alice", old, address="192.0.2.1", now=T0)
        _, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
        accounts.update_user(user.id, password=new, keep_tokens=keep, now=T0)
        assert accounts.resolve_session(ticket.token, now=T0) is None
        assert (accounts.resolve_token(secret, now=T0) is not None) is keep
        old = new
    with pytest.raises(InvalidCredentialsError):
        accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    accounts.login("alice", old, address="192.0.2.1", now=T0)


def test_a_child_token_lives_no_longer_than_its_parent(accounts: Accounts) -> None:
    """If a token is minted by a token, then it expires no later than its parent, and
    revoking the parent revokes its children and theirs, not its siblings; a mint
    under a revoked parent is refused."""
    user = make_user(accounts)
    day = T0 + timedelta(days=1)
    parent, parent_secret = accounts.create_token(user.id, "p", Role.VIEWER, expires_at=day, now=T0)
    later = T0 + timedelta(days=90)
    child, child_secret = accounts.create_token(
        user.id, "c", Role.VIEWER, expires_at=later, now=T0, parent_id=parent.id
    )
    assert child.expires_at == day
    forever, _ = accounts.create_token(
        user.id, "f", Role.VIEWER, expires_at=None, now=T0, parent_id=parent.id
    )
    assert forever.expires_at == day
    _, grandchild = accounts.create_token(
        user.id, "g", Role.VIEWER, expires_at=None, now=T0, parent_id=child.id
    )
    _, sibling = accounts.create_token(user.id, "s", Role.VIEWER, expires_at=None, now=T0)
    assert accounts.resolve_token(grandchild, now=day) is None  # the parent's expiry
    accounts.revoke_token(parent.id, now=T0)
    for secret in (parent_secret, child_secret, grandchild):
        assert accounts.resolve_token(secret, now=T0) is None
    assert accounts.resolve_token(sibling, now=T0) is not None
    with pytest.raises(TokenNotFoundError, match="revoked meanwhile"):
        accounts.create_token(
            user.id, "late", Role.VIEWER, expires_at=None, now=T0, parent_id=parent.id
        )


def test_disabling_ends_sessions_and_revokes_tokens(accounts: Accounts) -> None:
    """If a user is disabled, then its sessions and tokens stop working, and re-enabling
    it brings neither back."""
    user = make_user(accounts)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    token, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
    disabled = accounts.update_user(user.id, disabled=True, now=T0 + timedelta(minutes=1))
    assert disabled.disabled
    assert accounts.get_user(user.id) == disabled
    assert accounts.resolve_session(ticket.token, now=T0) is None
    assert accounts.resolve_token(secret, now=T0) is None
    accounts.update_user(user.id, disabled=False, now=T0 + timedelta(minutes=2))
    assert accounts.resolve_token(secret, now=T0) is None
    [revoked] = accounts.list_tokens(user.id)
    assert (revoked.id, revoked.revoked_at) == (token.id, T0 + timedelta(minutes=1))


def test_a_role_change_applies_to_open_sessions(accounts: Accounts) -> None:
    """If a user's role changes, then its open sessions carry the new role at once."""
    user = make_user(accounts, role=Role.VIEWER)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    assert accounts.update_user(user.id, role=Role.OPERATOR, now=T0).role is Role.OPERATOR
    resolved = accounts.resolve_session(ticket.token, now=T0)
    assert resolved is not None
    assert resolved[0].role is Role.OPERATOR


def test_deleting_a_user_removes_its_sessions_and_tokens(
    accounts: Accounts, database: Database
) -> None:
    """If a user is deleted, then it is gone with its sessions and tokens, and deleting
    or changing it again is a not-found error."""
    user = make_user(accounts)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
    accounts.delete_user(user.id)
    assert accounts.get_user(user.id) is None
    assert accounts.resolve_session(ticket.token, now=T0) is None
    assert rows(database, "SELECT id FROM jobledger_api_tokens") == []
    with pytest.raises(AccountNotFoundError):
        accounts.delete_user(user.id)
    with pytest.raises(AccountNotFoundError):
        accounts.update_user(user.id, role=Role.VIEWER, now=T0)


def test_the_last_enabled_admin_stays(accounts: Accounts) -> None:
    """If a change would leave no enabled admin (delete, demote, disable), then it is
    refused; with a second admin it goes through, and then that one is the last."""
    root = make_user(accounts, "root", Role.ADMIN)
    with pytest.raises(LastAdminError, match="make another user an admin first"):
        accounts.delete_user(root.id)
    with pytest.raises(LastAdminError):
        accounts.update_user(root.id, role=Role.OPERATOR, now=T0)
    with pytest.raises(LastAdminError):
        accounts.update_user(root.id, disabled=True, now=T0)
    assert accounts.get_user(root.id) == root
    other = make_user(accounts, "other", Role.ADMIN)
    accounts.update_user(root.id, role=Role.VIEWER, now=T0)
    with pytest.raises(LastAdminError):
        accounts.update_user(other.id, disabled=True, now=T0)
    accounts.update_user(root.id, role=Role.ADMIN, now=T0)
    accounts.delete_user(other.id)
    assert [u.username for u in accounts.list_users()] == ["root"]


# API tokens


def test_a_token_resolves_until_revoked(accounts: Accounts) -> None:
    """If a token is created, then its plaintext resolves to the user with the token's
    role, its use is recorded, and after revocation it resolves to nothing."""
    user = make_user(accounts)
    token, secret = accounts.create_token(
        user.id, " deploy bot ", Role.VIEWER, expires_at=None, now=T0
    )
    assert secret.startswith("jl_")
    assert (token.name, token.role, token.user_id) == ("deploy bot", Role.VIEWER, user.id)
    principal = accounts.resolve_token(secret, now=T0 + timedelta(minutes=1))
    assert principal is not None
    assert (principal.user, principal.role, principal.via) == (user, Role.VIEWER, "token")
    [listed] = accounts.list_tokens(user.id)
    assert listed.last_used_at == T0 + timedelta(minutes=1)
    accounts.revoke_token(token.id, now=T0 + timedelta(minutes=2))
    accounts.revoke_token(token.id, now=T0 + timedelta(minutes=3))
    assert accounts.resolve_token(secret, now=T0 + timedelta(minutes=4)) is None
    assert accounts.list_tokens()[0].revoked_at == T0 + timedelta(minutes=2)


def test_a_change_elsewhere_counts_within_a_second(
    accounts: Accounts, database: Database, hasher: CountingHasher
) -> None:
    """If another process revokes a token this one read a moment ago, then this one
    answers from what it read for less than a second (on the event loop's path too)
    and from the table after it; a revocation through this process counts at once."""
    elsewhere = Accounts(SqlAccountStore(database), AccountSettings(), hasher=hasher)
    user = make_user(accounts)
    first, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
    second, other = accounts.create_token(user.id, "cd", Role.VIEWER, expires_at=None, now=T0)
    assert accounts.recent_token(secret, now=T0) is None  # never read: ask the table
    assert accounts.resolve_token(secret, now=T0) is not None
    assert accounts.recent_token(secret, now=T0 + timedelta(milliseconds=10)) is not None
    elsewhere.revoke_token(first.id, now=T0)
    within = T0 + timedelta(milliseconds=999)
    assert accounts.resolve_token(secret, now=within) is not None
    assert accounts.recent_token(secret, now=within) is not None
    assert accounts.resolve_token(secret, now=T0 + timedelta(seconds=1)) is None
    assert accounts.recent_token(secret, now=T0 + timedelta(seconds=1)) is None
    assert accounts.resolve_token(other, now=T0) is not None
    accounts.revoke_token(second.id, now=T0)
    assert accounts.recent_token(other, now=T0) is None
    assert accounts.resolve_token(other, now=T0) is None


def test_a_kept_token_is_judged_at_the_time_asked(accounts: Accounts) -> None:
    """If a kept token expires, or its user is disabled through this process, within
    the second it is kept, then it is refused from then on."""
    user = make_user(accounts)
    expiry = T0 + timedelta(milliseconds=500)
    _, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=expiry, now=T0)
    _, other = accounts.create_token(user.id, "cd", Role.VIEWER, expires_at=None, now=T0)
    assert accounts.resolve_token(secret, now=T0) is not None
    assert accounts.recent_token(secret, now=expiry) is None
    assert accounts.resolve_token(secret, now=expiry) is None
    assert accounts.resolve_token(other, now=T0) is not None
    admin = make_user(accounts, "root", Role.ADMIN)
    accounts.update_user(user.id, disabled=True, now=T0, by=admin.role)
    assert accounts.resolve_token(other, now=T0) is None


def test_a_kept_token_touches_its_last_use_once_a_minute(accounts: Accounts) -> None:
    """If a kept token is used often, then its last use is written once a minute, not
    on every request, and the event loop's path declines when a write is due."""
    user = make_user(accounts)
    _, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
    assert accounts.resolve_token(secret, now=T0) is not None
    assert accounts.recent_token(secret, now=T0 + timedelta(milliseconds=1)) is not None
    [listed] = accounts.list_tokens(user.id)
    assert listed.last_used_at == T0
    later = T0 + timedelta(minutes=1)
    assert accounts.resolve_token(secret, now=later) is not None
    assert accounts.recent_token(secret, now=later) is not None  # kept with its touch
    [listed] = accounts.list_tokens(user.id)
    assert listed.last_used_at == later


def test_unknown_tokens_resolve_to_nothing(accounts: Accounts) -> None:
    """If a token is unknown or malformed, then it resolves to nothing, and revoking an
    unknown id is a not-found error."""
    assert accounts.resolve_token("jl_" + "x" * 43, now=T0) is None
    assert accounts.resolve_token("", now=T0) is None
    assert accounts.resolve_session("nope", now=T0) is None
    with pytest.raises(TokenNotFoundError):
        accounts.revoke_token(uuid.uuid4(), now=T0)


def test_a_token_expires(accounts: Accounts) -> None:
    """If a token has an expiry, then it resolves before it and not from it on."""
    user = make_user(accounts)
    expiry = T0 + timedelta(hours=1)
    token, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=expiry, now=T0)
    assert token.expires_at == expiry
    assert accounts.resolve_token(secret, now=expiry - timedelta(seconds=1)) is not None
    assert accounts.resolve_token(secret, now=expiry) is None


def test_a_token_cannot_outrank_its_user(accounts: Accounts) -> None:
    """If a token asks for more than its user's role, then it is refused; if the user is
    demoted later, then the token acts with the user's new role at most."""
    operator = make_user(accounts, "alice", Role.OPERATOR)
    with pytest.raises(RoleTooHighError, match="cannot have a token with the role admin"):
        accounts.create_token(operator.id, "ci", Role.ADMIN, expires_at=None, now=T0)
    make_user(accounts, "root", Role.ADMIN)
    _, secret = accounts.create_token(operator.id, "ci", Role.OPERATOR, expires_at=None, now=T0)
    accounts.update_user(operator.id, role=Role.VIEWER, now=T0)
    principal = accounts.resolve_token(secret, now=T0)
    assert principal is not None
    assert principal.role is Role.VIEWER


def test_a_token_needs_a_name_a_future_expiry_and_a_user(accounts: Accounts) -> None:
    """If a token has no name, an expiry in the past or no user, then it is refused."""
    user = make_user(accounts)
    with pytest.raises(InvalidTokenSpecError):
        accounts.create_token(user.id, "  ", Role.VIEWER, expires_at=None, now=T0)
    with pytest.raises(InvalidTokenSpecError):
        accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=T0, now=T0)
    with pytest.raises(AccountNotFoundError):
        accounts.create_token(uuid.uuid4(), "ci", Role.VIEWER, expires_at=None, now=T0)
    assert accounts.list_tokens() == []


def test_token_use_is_written_at_most_once_a_minute(accounts: Accounts) -> None:
    """If a token is used several times within a minute, then last_used_at keeps the
    first use until a minute has passed."""
    user = make_user(accounts)
    _, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
    for seconds in (0, 20, 59):
        accounts.resolve_token(secret, now=T0 + timedelta(seconds=seconds))
    assert accounts.list_tokens()[0].last_used_at == T0
    accounts.resolve_token(secret, now=T0 + timedelta(seconds=60))
    assert accounts.list_tokens()[0].last_used_at == T0 + timedelta(seconds=60)


# The first admin


def test_production_refuses_a_missing_or_weak_admin_password(accounts: Accounts) -> None:
    """If no admin exists in production and the admin password is missing or weak, then
    startup fails naming JOBLEDGER_ADMIN_PASSWORD and the rule, and nothing is created."""
    with pytest.raises(WeakAdminPasswordError, match="JOBLEDGER_ADMIN_PASSWORD is not set"):
        accounts.ensure_admin("admin", None, production=True, now=T0)
    with pytest.raises(WeakAdminPasswordError, match="JOBLEDGER_ADMIN_PASSWORD is not set"):
        accounts.ensure_admin("admin", "", production=True, now=T0)
    with pytest.raises(
        WeakAdminPasswordError, match=r"JOBLEDGER_ADMIN_PASSWORD is too weak.*use at least 12"
    ):
        accounts.ensure_admin("admin", "secret", production=True, now=T0)
    assert accounts.list_users() == []


def test_production_creates_the_admin_once(accounts: Accounts) -> None:
    """If no admin exists and the password is strong, then the admin is created; on the
    next start it is found, and the password is no longer needed."""
    admin, created = accounts.ensure_admin("Admin", PASSWORD, production=True, now=T0)
    assert created
    assert (admin.username, admin.role) == ("admin", Role.ADMIN)
    assert accounts.ensure_admin("admin", None, production=True, now=T0) == (admin, False)
    assert accounts.login("admin", PASSWORD, address="192.0.2.1", now=T0)[0] == admin


def test_dev_creates_the_admin_with_the_given_password(accounts: Accounts) -> None:
    """If no admin exists in dev mode, then the admin is created with the given password
    even if it is weak; an empty one is still refused."""
    with pytest.raises(WeakAdminPasswordError, match="JOBLEDGER_ADMIN_PASSWORD"):
        accounts.ensure_admin("admin", "", production=False, now=T0)
    admin, created = accounts.ensure_admin("admin", "admin", production=False, now=T0)
    assert created
    assert accounts.login("admin", "admin", address="127.0.0.1", now=T0)[0] == admin


def test_the_admin_name_taken_by_a_non_admin_is_named(accounts: Accounts) -> None:
    """If no admin exists but the admin's name belongs to another user, then startup
    fails naming JOBLEDGER_ADMIN_USERNAME."""
    make_user(accounts, "admin", Role.VIEWER)
    with pytest.raises(AccountExistsError, match="JOBLEDGER_ADMIN_USERNAME"):
        accounts.ensure_admin("admin", PASSWORD, production=True, now=T0)


# What is stored


def test_only_hashes_are_stored(accounts: Accounts, database: Database) -> None:
    """If users log in and tokens are made, then the password is stored only as an
    argon2id hash and no session or API token appears anywhere in the account tables."""
    user = make_user(accounts)
    _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
    _, secret = accounts.create_token(user.id, "ci", Role.VIEWER, expires_at=None, now=T0)
    fail_logins(accounts, "alice", 1)
    [(stored,)] = rows(database, "SELECT password_hash FROM jobledger_users")
    assert str(stored).startswith("$argon2id$")
    cells = [
        str(cell) for table in ACCOUNT_TABLES for row in table_rows(database, table) for cell in row
    ]
    assert cells
    for plaintext in (PASSWORD, WRONG, ticket.token, secret, secret.removeprefix("jl_")):
        assert not any(plaintext in cell for cell in cells)


def test_the_container_builds_accounts_from_the_settings(store_settings: Settings) -> None:
    """If a process is bootstrapped, then its accounts use the store's database and the
    session settings."""
    with bootstrap(store_settings) as container:
        accounts = container.accounts()
        user = accounts.create_user("alice", PASSWORD, Role.VIEWER, now=T0)
        _, ticket = accounts.login("alice", PASSWORD, address="192.0.2.1", now=T0)
        assert ticket.expires_at == T0 + timedelta(hours=store_settings.session_absolute_hours)
        assert container.accounts().get_user(user.id) == user


def test_no_grant_exceeds_the_credential_that_makes_it(accounts: Accounts) -> None:
    """If a credential holding a role asks to create a token, create a user, change a
    role, reset a password or delete a user above that role, then it is refused and
    nothing changes; within its role it succeeds."""
    root = make_user(accounts, "root", Role.ADMIN)
    make_user(accounts, "root2", Role.ADMIN)
    alice = make_user(accounts, "alice", Role.VIEWER)
    refused: list[Callable[[], object]] = [
        lambda: accounts.create_token(
            root.id, "t", Role.ADMIN, expires_at=None, now=T0, by=Role.VIEWER
        ),
        lambda: accounts.create_user("eve", PASSWORD, Role.ADMIN, now=T0, by=Role.OPERATOR),
        lambda: accounts.update_user(alice.id, role=Role.ADMIN, now=T0, by=Role.OPERATOR),
        lambda: accounts.update_user(root.id, password=PASSWORD + "!", now=T0, by=Role.OPERATOR),
        lambda: accounts.update_user(root.id, disabled=True, now=T0, by=Role.VIEWER),
        lambda: accounts.delete_user(root.id, by=Role.OPERATOR),
    ]
    for attempt in refused:
        with pytest.raises(RoleTooHighError, match="cannot"):
            attempt()
    assert accounts.list_tokens() == []
    assert [(u.username, u.role) for u in accounts.list_users()] == [
        ("alice", Role.VIEWER),
        ("root", Role.ADMIN),
        ("root2", Role.ADMIN),
    ]
    token, _ = accounts.create_token(
        root.id, "t", Role.VIEWER, expires_at=None, now=T0, by=Role.VIEWER
    )
    assert token.role is Role.VIEWER
    assert accounts.update_user(alice.id, role=Role.OPERATOR, now=T0, by=Role.ADMIN).role == (
        Role.OPERATOR
    )
