"""Field types every body shares, and the base of every request body.

Requests forbid unknown fields, so a typo is an error instead of a silently ignored
setting. Durations are seconds (JSON has no duration type); times are ISO 8601 with
an offset.
"""

from datetime import datetime
from typing import Annotated, Any

import msgspec

# Bounds that keep a number convertible (a duration of 1e300 s is an overflow, not a
# validation message); the domain checks the real limits and names the fix.
Seconds = Annotated[float, msgspec.Meta(ge=0, le=10_000_000)]
SmallInt = Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)]
# PostgreSQL text cannot hold NUL, and no name, reason or filter needs one.
NO_NUL = "^[^\\x00]*$"
Text = Annotated[str, msgspec.Meta(max_length=2000, pattern=NO_NUL)]
Short = Annotated[str, msgspec.Meta(max_length=200, pattern=NO_NUL)]
Tiny = Annotated[str, msgspec.Meta(max_length=64, pattern=NO_NUL)]
AwareTime = Annotated[datetime, msgspec.Meta(tz=True)]
Payload = Annotated[
    dict[str, Any],
    msgspec.Meta(
        description=(
            "a JSON object for the handler: integers within signed 64 bits, no NUL in keys "
            "or strings, keys up to 256 characters, nesting up to 32 levels, at most "
            "JOBLEDGER_MAX_PAYLOAD_BYTES as JSON; a value past a limit is refused with "
            "422 naming its path"
        )
    ),
]
Zone = Annotated[
    str,
    msgspec.Meta(
        max_length=64,
        pattern=NO_NUL,
        description="an IANA region name (Area/Location, Etc/..., or UTC), e.g. Europe/Berlin",
    ),
]


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


def strict_bodies() -> list[type[Strict]]:
    """Every request body type (each refuses unknown fields)."""
    found: list[type[Strict]] = []
    pending = [Strict]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return found
