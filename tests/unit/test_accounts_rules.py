"""Account rules without I/O: usernames, passwords, roles, secrets, settings."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import argon2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.roles import Role
from jobledger.infra import credentials
from jobledger.infra.common_passwords import common_password_base, common_passwords
from jobledger.infra.settings import load_settings
from jobledger.services.identities import (
    AccountSettings,
    InvalidPasswordError,
    InvalidUsernameError,
    LoginThrottledError,
    validate_password,
    validate_username,
)

CHEAP = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.mark.parametrize("name", ["abc", "alice", "ops.bot-1_x", "a" * 64, "0.0"])
def test_valid_usernames_are_kept(name: str) -> None:
    """If a username has 3 to 64 of a-z, 0-9, dot, underscore, hyphen, then it is valid."""
    assert validate_username(name) == name


def test_usernames_are_stored_lower_case() -> None:
    """If a username has capitals, then it is stored lower-case (unique in any case)."""
    assert validate_username("Alice.OPS") == "alice.ops"


@pytest.mark.parametrize(
    "name", ["ab", "a" * 65, "al ice", "al@ice", "ålice", "\u212aate", "alice\n", ""]
)
def test_invalid_usernames_name_the_rule(name: str) -> None:
    """If a username is too short, too long or has other characters, then the error
    states the rule."""
    with pytest.raises(InvalidUsernameError, match="3 to 64 characters: a-z, 0-9"):
        validate_username(name)


@pytest.mark.parametrize(
    ("password", "rule"),
    [
        ("short-pw", "it has 8 characters; use at least 12"),
        ("x" * 1025, "at most 1024 characters"),
        ("abababababababab", "at least 5 different characters"),
        ("my-alice-password", "contains the username"),
        ("My-ALICE-Password", "contains the username"),
    ],
)
def test_weak_passwords_name_the_rule_and_the_fix(password: str, rule: str) -> None:
    """If a password breaks a rule, then the error names that rule and how to meet it."""
    with pytest.raises(InvalidPasswordError, match=rule):
        validate_password(password, username="alice", min_length=12)


@pytest.mark.parametrize("password", ["correct horse battery", "x7#Lq9!mZ2$w", "é" * 6 + "ünïcødé"])
def test_strong_passwords_pass(password: str) -> None:
    """If a password is long enough and varied, then it is accepted."""
    validate_password(password, username="alice", min_length=12)


@pytest.mark.parametrize(
    ("password", "base"),
    [
        ("password1234", "password"),
        ("Password1234!", "password"),
        ("P@ssw0rd2024!", "password"),
        ("!!Qwertyuiop99", "qwertyuiop"),
        ("letmeinletmein", "letmein"),
        ("1q2w3e4r5t6y", "1q2w3e4r5t6y"),
        ("123456789012", "123456789012"),
    ],
)
def test_common_passwords_are_refused_naming_the_fix(password: str, base: str) -> None:
    """If a password is a common one, or one with digits and symbols around it or
    look-alike digits in it, then it is refused naming what it is made of and the fix."""
    with pytest.raises(InvalidPasswordError) as refused:
        validate_password(password, username="alice", min_length=12)
    assert f"it is a common password ({base!r}" in str(refused.value)
    assert refused.value.field == "password"
    assert "a few unrelated words" in str(refused.value.fix)


WORDS = sorted(w for w in common_passwords() if w.isalpha())


@given(st.sampled_from(WORDS), st.integers(0, 9999), st.sampled_from(["", "!", "?!", "#"]))
def test_a_listed_word_with_a_number_added_is_refused(word: str, number: int, mark: str) -> None:
    """If a password is a listed word, capitalised, with a number and a symbol added,
    then it is refused naming that word."""
    assert common_password_base(f"{word.title()}{number}{mark}") == word


def test_the_minimum_length_is_a_setting() -> None:
    """If the minimum length is raised, then a password under it is refused."""
    with pytest.raises(InvalidPasswordError, match="use at least 20"):
        validate_password("correct horse battery"[:19], username="bob", min_length=20)


@pytest.mark.parametrize(
    ("role", "other", "expected"),
    [
        (Role.ADMIN, Role.ADMIN, True),
        (Role.ADMIN, Role.OPERATOR, True),
        (Role.ADMIN, Role.VIEWER, True),
        (Role.OPERATOR, Role.ADMIN, False),
        (Role.OPERATOR, Role.OPERATOR, True),
        (Role.OPERATOR, Role.VIEWER, True),
        (Role.VIEWER, Role.ADMIN, False),
        (Role.VIEWER, Role.OPERATOR, False),
        (Role.VIEWER, Role.VIEWER, True),
    ],
)
def test_roles_include_the_lower_ones(role: Role, other: Role, expected: bool) -> None:
    """If a role is at or above another (admin ⊇ operator ⊇ viewer), then it includes it."""
    assert role.includes(other) is expected


def test_secrets_are_random_and_stored_as_sha256() -> None:
    """If tokens are made, then they are unique, API tokens carry the jl_ prefix, and the
    stored form is the 64-hex sha256, not the token."""
    tokens = {credentials.new_api_token() for _ in range(100)}
    assert len(tokens) == 100
    token = tokens.pop()
    assert token.startswith("jl_")
    assert len(token) == 3 + 43
    digest = credentials.token_digest(token)
    assert len(digest) == 64
    assert token not in digest
    assert digest == credentials.token_digest(token)


def test_password_hashes_are_argon2id_and_verify() -> None:
    """If a password is hashed, then the hash is argon2id, the password verifies, another
    does not, and a missing user (no hash) never verifies."""
    hashing = credentials.PasswordHashing(CHEAP)
    stored = hashing.hash("correct horse battery")
    assert stored.startswith("$argon2id$")
    assert hashing.verify(stored, "correct horse battery")
    assert not hashing.verify(stored, "wrong horse battery")
    assert not hashing.verify(None, "correct horse battery")
    assert not hashing.verify("not a hash", "correct horse battery")


class _CountingHasher(argon2.PasswordHasher):
    """A cheap argon2id hasher that notes how many of its calls overlap."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.lock = threading.Lock()
        self.running = self.most = 0

    def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        try:
            return super().hash(password, salt=salt)
        finally:
            with self.lock:
                self.running -= 1


def test_at_most_two_hashes_run_at_once() -> None:
    """If eight threads hash passwords at the same time, then at most two hashes run at
    once (each one takes argon2's memory cost while it runs), and all eight finish."""
    hasher = _CountingHasher()
    hashing = credentials.PasswordHashing(hasher)
    with ThreadPoolExecutor(8) as pool:
        hashes = list(pool.map(hashing.hash, [f"password {n}" for n in range(8)]))
    assert len(set(hashes)) == 8
    assert hasher.most == 2


def test_only_argon2id_hashers_are_accepted() -> None:
    """If a hasher of another argon2 type is passed, then it is refused."""
    with pytest.raises(ValueError, match="argon2id"):
        credentials.PasswordHashing(argon2.PasswordHasher(type=argon2.Type.I))


def test_a_hash_with_weaker_parameters_is_renewed() -> None:
    """If the stored hash used cheaper parameters than the hasher's, then a new hash is
    made; with the same parameters, none."""
    stored = credentials.PasswordHashing(CHEAP).hash("correct horse battery")
    stronger = argon2.PasswordHasher(time_cost=2, memory_cost=8, parallelism=1)
    renewed = credentials.PasswordHashing(stronger).rehashed(stored, "correct horse battery")
    assert renewed is not None
    assert "t=2" in renewed
    assert credentials.PasswordHashing(CHEAP).rehashed(stored, "correct horse battery") is None


def test_the_throttle_error_rounds_the_wait_up() -> None:
    """If a login is throttled for 90.2 s, then the message says 91 s and the error keeps
    the exact wait."""
    error = LoginThrottledError(timedelta(seconds=90.2))
    assert "91 s" in str(error)
    assert error.retry_after == timedelta(seconds=90.2)


def test_account_settings_come_from_the_settings() -> None:
    """If the session, login and password settings are set, then the account settings
    follow them, and so does the argon2id hasher they make."""
    settings = load_settings(
        {},
        session_idle_minutes="10",
        session_absolute_hours="2",
        login_max_failures="3",
        login_window_minutes="5",
        password_time_cost="2",
        password_memory_kib="1024",
        password_parallelism="2",
    )
    chosen = AccountSettings.from_settings(settings)
    assert chosen == AccountSettings(
        session_idle=timedelta(minutes=10),
        session_absolute=timedelta(hours=2),
        throttle_max_failures=3,
        throttle_window=timedelta(minutes=5),
        password_time_cost=2,
        password_memory_kib=1024,
        password_parallelism=2,
    )
    hasher = chosen.hasher()
    assert (hasher.time_cost, hasher.memory_cost, hasher.parallelism) == (2, 1024, 2)
    assert hasher.type is argon2.Type.ID
    assert AccountSettings.from_settings(load_settings({})) == AccountSettings()
    default = AccountSettings().hasher()
    assert (default.time_cost, default.memory_cost, default.parallelism) == (3, 65_536, 4)
