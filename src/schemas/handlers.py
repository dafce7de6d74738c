"""Handlers as the API lists them."""

from typing import Any

import msgspec


class HandlerOut(msgspec.Struct, kw_only=True):
    name: str
    description: str
    # The JSON schema of the payload the handler declares (a msgspec Struct), or None
    # when it takes any JSON object.
    payload_schema: dict[str, Any] | None
