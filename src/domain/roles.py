"""The roles a credential may hold, and the order that caps every grant.

A caller acts with one role; every way to hand out rights (a token's role, a new user's
role, a role change) is capped by the role of the credential that asks.
"""

import enum


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    def includes(self, other: "Role") -> bool:
        """Whether this role may do all that ``other`` may: admin ⊇ operator ⊇ viewer."""
        order = list(Role)
        return order.index(self) >= order.index(Role(other))
