"""jobledger: a cron-capable job scheduler whose source of truth is an event log.

Application code declares its handlers and schedules with ``@jobledger.handler`` and
``@jobledger.periodic`` (see ``jobledger.declarations``) and talks to a running
jobledger with ``jobledger.client``. Importing this package loads neither the server
nor its database drivers.
"""

from typing import TYPE_CHECKING, Any

from jobledger.declarations import handler, periodic

if TYPE_CHECKING:
    from jobledger.runtime.handlers.base import HandlerContext

__all__ = ["HandlerContext", "handler", "periodic"]


def __getattr__(name: str) -> Any:  # noqa: ANN401 (what the name is)
    # The context type is the worker's; only a module that annotates ``ctx`` with it
    # pays for importing the worker's side.
    if name == "HandlerContext":
        from jobledger.runtime.handlers.base import HandlerContext  # noqa: PLC0415

        return HandlerContext
    raise AttributeError(f"module 'jobledger' has no attribute {name!r}")
