"""Who asks for a use case: the name the log records, how they came, and the role
that caps it."""

from dataclasses import dataclass
from typing import Self
from uuid import UUID

from jobledger.domain.roles import Role
from jobledger.services.errors import NotPermittedError
from jobledger.services.identities import Principal

# How a caller came (``Actor.via``). A token's is ``token:`` and its name, so that no
# token's name reads as one of the others.
SESSION = "session"
TOKEN = "token"  # noqa: S105 (a kind of credential, not one)
CLI = "cli"
OUTBOX = "outbox"
SYSTEM = "system"


@dataclass(frozen=True)
class Actor:
    """The caller of a use case. ``name`` and ``via`` go into the events it writes
    (``by``, and how the caller came: ``session``, ``token:<token name>``, ``cli``,
    ``outbox``, ``system``); ``role`` is the calling credential's, so no use case
    grants more than it holds."""

    name: str
    role: Role
    user_id: UUID | None = None  # the account behind it; None for the CLI
    via: str = SYSTEM

    @classmethod
    def of(cls, principal: Principal) -> Self:
        """The actor of a signed-in request: its user, with the credential's role, and
        the session or the named token it came with."""
        via = SESSION if principal.token_name is None else f"{TOKEN}:{principal.token_name}"
        return cls(principal.user.username, principal.role, principal.user.id, via)

    def require(self, role: Role) -> None:
        """Refuse unless the caller's role includes ``role``."""
        if not self.role.includes(role):
            raise NotPermittedError(f"this needs the {role} role; {self.name} has {self.role}")


def operator_of_store(name: str) -> Actor:
    """Someone who runs the CLI on the store: whoever can reach the database directly
    holds every right already (the CLI records the name given, e.g. ``--by``)."""
    return Actor(name, Role.ADMIN, via=CLI)
