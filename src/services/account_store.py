"""The account store: the port the accounts' use cases (``identities.Accounts``) keep
users, sessions, API tokens and login failures through (ADR 13).

A use case whose rules decide between its statements runs them in one transaction of
the store (``AccountStore.transaction``): an error raised inside it rolls all of them
back, so a check and the writes it allows are one step. The rest are one call each.
Every time is passed in; the store never reads the clock.
"""

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol
from uuid import UUID

from jobledger.domain.roles import Role
from jobledger.infra.accounts import ApiToken, NewSession, SignIn, StoredKey, StoredSession, User


class AccountTransaction(Protocol):
    """The account store inside one transaction, which commits when the block ends."""

    # Users

    def find_user(self, user_id: UUID) -> User | None: ...

    def enabled_admins_besides(self, user_id: UUID) -> int:
        """How many enabled admins other than ``user_id`` there are, with their rows
        locked until the transaction ends: two admins demoting each other cannot each
        count the other."""
        ...

    def set_role(self, user_id: UUID, role: Role) -> None: ...
    def set_disabled(self, user_id: UUID, *, disabled: bool) -> None: ...
    def set_password(self, user_id: UUID, password_hash: str, *, at: datetime) -> None: ...
    def mark_updated(self, user_id: UUID, *, at: datetime) -> None: ...
    def end_sessions(self, user_id: UUID) -> None: ...

    def revoke_tokens(self, user_id: UUID, *, at: datetime) -> None:
        """Revoke the user's live API tokens."""
        ...

    def delete_user(self, user_id: UUID) -> None:
        """Delete the user and its API tokens (not its sessions: ``end_sessions``)."""
        ...

    # Sign-in

    def lock_throttle(self) -> None:
        """Hold the one lock every attempt's reservation takes until the transaction
        ends: parallel attempts are counted and booked one after the other."""
        ...

    def nth_failure(self, key: str, *, after: datetime, offset: int) -> datetime | None:
        """The time of the failure ``offset`` places below the most recent one of the
        bucket ``key`` (0: the most recent), among those after ``after``; None if the
        bucket holds no more than ``offset`` of them."""
        ...

    def record_failures(self, keys: Sequence[str], *, at: datetime) -> None:
        """Book a failed attempt at ``at`` in each bucket of ``keys``."""
        ...

    def forget_failures(self, *, up_to: datetime) -> None:
        """Delete every bucket's failures at or before ``up_to``."""
        ...

    def sign_in(self, username: str) -> SignIn | None: ...

    def insert_session(self, session: NewSession, user_id: UUID, password_hash: str) -> bool:
        """Open ``session``; False (nothing written) unless the user is still enabled
        and still has ``password_hash``: a password change or a disable that committed
        meanwhile wins."""
        ...

    def clear_failures(self, key: str) -> None:
        """Empty the bucket ``key``."""
        ...

    def release_failure(self, key: str, *, at: datetime) -> None:
        """Take back the booking made at ``at`` in the bucket ``key``; a twin booked in
        the same millisecond goes too, which only ever errs by one guess."""
        ...

    def end_expired_sessions(self, *, at: datetime) -> None: ...

    def rehash(self, user_id: UUID, password_hash: str, *, replacing: str) -> None:
        """Store the new hash of the same password, unless the hash is no longer
        ``replacing``: a password changed meanwhile is not overwritten."""
        ...

    # API tokens

    def lock_token(self, token_id: UUID) -> ApiToken | None:
        """The token, its row locked until the transaction ends: a revocation of it
        waits for this transaction, or came first."""
        ...

    def insert_token(self, token: ApiToken, digest: str, *, parent_id: UUID | None) -> None: ...


class AccountStore(Protocol):
    """Users, sessions, API tokens and login failures."""

    def transaction(self) -> contextlib.AbstractContextManager[AccountTransaction]:
        """The store inside one transaction; an error raised in the block rolls it back."""
        ...

    def insert_user(self, user: User, password_hash: str) -> bool:
        """Add ``user`` with ``password_hash``, created, updated and given its password
        at ``user.created_at``; False, adding nothing, if its username is taken."""
        ...

    def find_user(self, user_id: UUID) -> User | None: ...

    def list_users(self) -> list[User]:
        """Every user, by username."""
        ...

    def an_admin(self, preferring: str) -> User | None:
        """An enabled admin: the one called ``preferring`` if it is one, else the
        oldest; None if there is none."""
        ...

    def find_session(self, digest: str) -> StoredSession | None: ...

    def touch_session(self, digest: str, *, at: datetime) -> None:
        """Move the session's last use to ``at``, unless it is there already or later."""
        ...

    def delete_session(self, digest: str) -> None: ...
    def find_key(self, digest: str) -> StoredKey | None: ...

    def touch_key(self, digest: str, *, at: datetime) -> None:
        """Move the token's last use to ``at``, unless it is there already or later."""
        ...

    def list_tokens(self, user_id: UUID | None = None) -> list[ApiToken]:
        """The API tokens (of ``user_id``), oldest first."""
        ...

    def revoke_token(self, token_id: UUID, *, at: datetime) -> bool:
        """Revoke the token and every token minted from it, down the tree, at once
        (already revoked ones keep their time); False if there is no such token."""
        ...
