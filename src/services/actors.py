"""Who asks for a use case: the name the log records, and the role that caps it."""

from dataclasses import dataclass
from typing import Self
from uuid import UUID

from jobledger.runtime.accounts import Principal, Role
from jobledger.services.errors import NotPermittedError


@dataclass(frozen=True)
class Actor:
    """The caller of a use case. ``name`` goes into the events it writes (``by``);
    ``role`` is the calling credential's, so no use case grants more than it holds."""

    name: str
    role: Role
    user_id: UUID | None = None  # the account behind it; None for the CLI

    @classmethod
    def of(cls, principal: Principal) -> Self:
        """The actor of a signed-in request: its user, with the credential's role."""
        return cls(principal.user.username, principal.role, principal.user.id)

    def require(self, role: Role) -> None:
        """Refuse unless the caller's role includes ``role``."""
        if not self.role.includes(role):
            raise NotPermittedError(f"this needs the {role} role; {self.name} has {self.role}")


def operator_of_store(name: str) -> Actor:
    """Someone who runs the CLI on the store: whoever can reach the database directly
    holds every right already (the CLI records the name given, e.g. ``--by``)."""
    return Actor(name, Role.ADMIN)
