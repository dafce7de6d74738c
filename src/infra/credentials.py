"""What a valid username and password are, and how secrets are made and kept.

People choose passwords, and people choose guessable ones, so passwords are kept as
argon2id hashes: slow and memory-hard on purpose. Session and API tokens are 256 random
bits that nobody can guess, so a fast sha256 is enough to keep the database from holding
a usable token, and it lets every request find its row through an index.
"""

import functools
import hashlib
import ipaddress
import re
import secrets
import threading

import argon2

from jobledger.infra.common_passwords import common_password_base

USERNAME_RULE = "3 to 64 characters: a-z, 0-9, dot, underscore or hyphen"
MAX_PASSWORD_LENGTH = 1024
MIN_DISTINCT_CHARACTERS = 5
API_TOKEN_PREFIX = "jl_"  # noqa: S105 (a public prefix, not a secret)
# (?a): a letter that only lower-cases to ASCII (the Kelvin sign) is not allowed in.
# Anchored, as the settings' declared pattern is searched, not matched whole.
USERNAME_PATTERN = r"(?ai)\A[a-z0-9._-]{3,64}\Z"
_USERNAME = re.compile(USERNAME_PATTERN)


def username_problem(username: str) -> str | None:
    """What is wrong with a username (as typed; it is stored lower-case), or None."""
    if _USERNAME.match(username) is None:
        return f"a username has {USERNAME_RULE}"
    return None


def password_problem(password: str, *, username: str, min_length: int) -> str | None:
    """Which password rule is broken and how to meet it, or None."""
    if len(password) < min_length:
        return (
            f"it has {len(password)} characters; use at least {min_length} "
            "(a few unrelated words are long and easy to remember)"
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"use at most {MAX_PASSWORD_LENGTH} characters"
    if len(set(password)) < MIN_DISTINCT_CHARACTERS:
        return f"use at least {MIN_DISTINCT_CHARACTERS} different characters"
    if username and username.lower() in password.lower():
        return "it contains the username; choose one that does not"
    common = common_password_base(password)
    if common is not None:
        return (
            f"it is a common password ({common!r} with digits or symbols added is among the"
            " first a guesser tries); use a few unrelated words, or one a password manager"
            " makes"
        )
    return None


# One host is handed a whole IPv6 /64 (SLAAC, privacy addresses): each of its 2^64
# addresses is the same client, not a fresh one.
IPV6_CLIENT_PREFIX = 64


def address_bucket(address: str) -> str:
    """What a per-address limit counts a client address as: an IPv6 address as its /64,
    an IPv4-mapped IPv6 address as the IPv4 address, anything else as given."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv4Address):
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.IPv6Network((parsed, IPV6_CLIENT_PREFIX), strict=False))


def new_secret() -> str:
    """256 random bits, URL-safe: session tokens and CSRF tokens."""
    return secrets.token_urlsafe(32)


def new_api_token() -> str:
    # The prefix lets secret scanners and people recognise a leaked jobledger token.
    return API_TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """How a random token is stored and looked up: its sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


# Each argon2id run takes its memory cost (64 MiB by default) for its duration; a burst
# of logins would otherwise take that many times over. Two at once keep both cores busy.
HASHING_AT_ONCE = 2
_HASHING_AT_ONCE = threading.BoundedSemaphore(HASHING_AT_ONCE)


@functools.cache
def _dummy_hash(hasher: argon2.PasswordHasher) -> str:
    return hasher.hash(new_secret())


@functools.cache
def argon2id_hasher(*, time_cost: int, memory_kib: int, parallelism: int) -> argon2.PasswordHasher:
    """The hasher for one cost; one object per cost, so its dummy hash is made once."""
    return argon2.PasswordHasher(
        time_cost=time_cost, memory_cost=memory_kib, parallelism=parallelism
    )


class PasswordHashing:
    """argon2id hashes, and a verify that costs the same whether or not the user exists;
    at most two hash computations run at once in a process."""

    def __init__(self, hasher: argon2.PasswordHasher | None = None) -> None:
        self._hasher = hasher or _DEFAULT_HASHER
        if self._hasher.type is not argon2.Type.ID:
            raise ValueError("passwords are hashed with argon2id; pass a hasher of that type")

    def prepare(self) -> None:
        """Make the dummy hash now (once per hasher), so that the first unknown username
        is not slower than the next ones. A process that signs nobody in never calls it:
        a hash takes its memory cost (64 MiB by default) while it runs."""
        self._dummy()

    def _dummy(self) -> str:
        with _HASHING_AT_ONCE:
            return _dummy_hash(self._hasher)

    def hash(self, password: str) -> str:
        with _HASHING_AT_ONCE:
            return self._hasher.hash(password)

    def verify(self, stored: str | None, password: str) -> bool:
        """Whether ``password`` matches ``stored``; None (no such user) checks a dummy
        hash instead, so the answer takes as long as for a wrong password."""
        try:
            checked = stored or self._dummy()
            with _HASHING_AT_ONCE:
                self._hasher.verify(checked, password)
        except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
            return False
        return stored is not None

    def rehashed(self, stored: str, password: str) -> str | None:
        """A new hash when the stored one uses weaker parameters than the hasher's."""
        if self._hasher.check_needs_rehash(stored):
            return self.hash(password)
        return None


_DEFAULT_HASHER = argon2.PasswordHasher()
