"""Accounts: sign-in and sessions, API tokens, users, and the first admin."""

from datetime import datetime, timedelta
from uuid import UUID

import structlog

from jobledger.domain.roles import Role
from jobledger.infra.accounts import ApiToken, User
from jobledger.infra.settings import Settings
from jobledger.services.actors import Actor
from jobledger.services.identities import (
    Accounts,
    Principal,
    SessionTicket,
    TokenNotFoundError,
)

log = structlog.get_logger(__name__)

DEV_ADMIN_PASSWORD = "jobledger-dev-admin"  # noqa: S105 (printed on purpose, dev mode only)


class AccountService:
    """The account use cases over the accounts tables (not events: ADR 13). Every
    grant is capped by the asking actor's role."""

    def __init__(self, accounts: Accounts) -> None:
        self.accounts = accounts

    # ---- sign-in --------------------------------------------------------------------

    def login(
        self, username: str, password: str, *, address: str, at: datetime
    ) -> tuple[User, SessionTicket]:
        return self.accounts.login(username, password, address=address, now=at)

    def logout(self, session_token: str) -> None:
        self.accounts.logout(session_token)

    def session(self, session_token: str, *, at: datetime) -> tuple[Principal, str] | None:
        """The principal and CSRF token of a live session, else None."""
        return self.accounts.resolve_session(session_token, now=at)

    def token_principal(self, secret: str, *, at: datetime) -> Principal | None:
        return self.accounts.resolve_token(secret, now=at)

    def recent_token_principal(self, secret: str, *, at: datetime) -> Principal | None:
        """``token_principal`` if it needs no input or output now, else None."""
        return self.accounts.recent_token(secret, now=at)

    def ensure_admin(self, settings: Settings, *, at: datetime) -> str | None:
        """Create the first admin if there is none; in dev mode, return the password to
        print when the default was used."""
        dev = settings.mode == "dev"
        password = settings.admin_password or (DEV_ADMIN_PASSWORD if dev else None)
        user, created = self.accounts.ensure_admin(
            settings.admin_username, password, production=not dev, now=at
        )
        if created:
            log.info("api.admin_created", username=user.username)
        if created and dev and not settings.admin_password:
            return DEV_ADMIN_PASSWORD
        return None

    # ---- tokens ---------------------------------------------------------------------

    def create_token(
        self,
        name: str,
        role: Role,
        *,
        expires_in: timedelta | None,
        at: datetime,
        by: Actor,
        minted_by: UUID | None = None,
    ) -> tuple[ApiToken, str]:
        """A Bearer token of the actor's own user; the secret is returned only here.
        Asked for with the token ``minted_by``, it lives no longer than that one."""
        expires = at + expires_in if expires_in else None
        return self.accounts.create_token(
            _user_of(by), name, role, expires_at=expires, now=at, by=by.role, parent_id=minted_by
        )

    def tokens(self, *, by: Actor) -> list[ApiToken]:
        """The actor's tokens; an admin sees everyone's."""
        owner = None if by.role.includes(Role.ADMIN) else _user_of(by)
        return self.accounts.list_tokens(owner)

    def revoke_token(self, token_id: UUID, *, at: datetime, by: Actor) -> None:
        if not by.role.includes(Role.ADMIN):
            mine = {t.id for t in self.accounts.list_tokens(_user_of(by))}
            if token_id not in mine:
                # Someone else's token answers like a missing one: ids are not disclosed.
                raise TokenNotFoundError(f"no API token {token_id} of yours")
        self.accounts.revoke_token(token_id, now=at)

    # ---- users ----------------------------------------------------------------------

    def users(self, *, by: Actor) -> list[User]:
        by.require(Role.ADMIN)
        return self.accounts.list_users()

    def create_user(
        self, username: str, password: str, role: Role, *, at: datetime, by: Actor
    ) -> User:
        by.require(Role.ADMIN)
        return self.accounts.create_user(username, password, role, now=at, by=by.role)

    def update_user(
        self,
        user_id: UUID,
        *,
        role: Role | None,
        disabled: bool | None,
        password: str | None,
        keep_tokens: bool = False,
        at: datetime,
        by: Actor,
    ) -> User:
        by.require(Role.ADMIN)
        return self.accounts.update_user(
            user_id,
            role=role,
            disabled=disabled,
            password=password,
            keep_tokens=keep_tokens,
            now=at,
            by=by.role,
        )

    def delete_user(self, user_id: UUID, *, by: Actor) -> None:
        by.require(Role.ADMIN)
        self.accounts.delete_user(user_id, by=by.role)


def _user_of(actor: Actor) -> UUID:
    if actor.user_id is None:
        raise TokenNotFoundError("API tokens belong to a user; sign in as one to manage them")
    return actor.user_id
