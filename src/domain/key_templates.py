"""Keys built from a run's payload: ``"order:{payload.order_id}"``.

Unique runs and limits name their key this way, so that one definition covers every
customer, order or account; each run resolves it from its own payload when it is
enqueued.
"""

import re
from typing import Any

from jobledger.domain.errors import InvalidDefinitionError

_FIELD = re.compile(r"\{payload\.([A-Za-z0-9_.\-]+)\}")


def resolve_key(template: str, payload: dict[str, Any], *, field: str) -> str:
    """``template`` with each ``{payload.a.b}`` replaced by that value of ``payload``;
    ``field`` names the template in the error a missing value raises."""
    return _FIELD.sub(lambda found: _lookup(payload, found.group(1), field), template)


def is_template(key: str) -> bool:
    """Whether ``key`` names payload fields (and so differs from run to run)."""
    return _FIELD.search(key) is not None


def _lookup(payload: dict[str, Any], path: str, field: str) -> str:
    value: Any = payload
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise InvalidDefinitionError(
                field,
                f"names payload.{path}, which the payload does not have",
                "send that field in the payload, or name another in the key",
            )
        value = value[part]
    if isinstance(value, dict | list) or value is None:
        raise InvalidDefinitionError(
            field,
            f"names payload.{path}, which is {type(value).__name__}",
            "name a field that holds a string or a number",
        )
    return str(value)
