"""Finding handlers by name: built in, entry points, dotted paths from the settings."""

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points

from jobledger.runtime.errors import SettingsError
from jobledger.runtime.handlers.base import Handler
from jobledger.runtime.handlers.builtin import BUILTIN

ENTRY_POINT_GROUP = "jobledger.handlers"


class HandlerRegistry:
    def __init__(self, handlers: Mapping[str, Handler]) -> None:
        self._handlers = dict(handlers)

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)


def load_registry(dotted: str = "") -> HandlerRegistry:
    """Built-ins, then entry points, then ``name=module:attr`` pairs (comma-separated)."""
    handlers: dict[str, Handler] = dict(BUILTIN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        handlers[point.name] = point.load()
    for pair in filter(None, (p.strip() for p in dotted.split(","))):
        name, _, path = pair.partition("=")
        handlers[name.strip()] = _import(name.strip(), path.strip())
    return HandlerRegistry(handlers)


def _import(name: str, path: str) -> Handler:
    module_name, _, attribute = path.partition(":")
    try:
        handler: Handler = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise SettingsError(
            f"JOBLEDGER_HANDLERS: cannot load handler {name!r} from {path!r} ({error}); "
            "use name=package.module:function"
        ) from None
    return handler
