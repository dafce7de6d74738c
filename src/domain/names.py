"""The one rule for what people name: jobs, workflows and named limits.

Names show up in lists, logs and URLs, and people pick things by them, so a name is
plain ASCII: letters, digits, spaces and a few separators. That leaves out look-alike
letters and the invisible format characters (bidi overrides, zero-width joiners,
Unicode category Cf) that would make two names read the same or one read backwards.
"""

import re
from typing import Final

from jobledger.domain.errors import InvalidDefinitionError

MAX_NAME_CHARS: Final = 200
NAME_RULE: Final = f"use 1-{MAX_NAME_CHARS} letters, digits, spaces and . _ : / -"
_NAME: Final = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9 ._:/-]{{0,{MAX_NAME_CHARS - 1}}}$")


def check_name(name: str, field: str = "name") -> None:
    """Raise ``InvalidDefinitionError`` naming ``field`` unless ``name`` is a name."""
    if not _NAME.fullmatch(name):
        raise InvalidDefinitionError(
            field, f"{name!r} is empty, too long or has unusual characters", NAME_RULE
        )
