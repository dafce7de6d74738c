"""jobledger: a cron-capable job scheduler whose source of truth is an event log.

Application code declares its handlers and schedules with ``@jobledger.handler`` and
``@jobledger.periodic`` (see ``jobledger.declarations``) and talks to a running
jobledger with ``jobledger.client``. A handler decides more than pass or fail by
raising ``jobledger.PermanentError``, ``jobledger.Snooze`` or ``jobledger.Discard``
(see docs/handlers.md). Importing this package loads neither the server nor its
database drivers.
"""

from typing import TYPE_CHECKING, Any

from jobledger.declarations import handler, periodic

if TYPE_CHECKING:
    from jobledger.runtime.handlers.base import (
        Discard,
        HandlerCancelledError,
        HandlerContext,
        HandlerError,
        PermanentError,
        Snooze,
    )

__all__ = [
    "Discard",
    "HandlerCancelledError",
    "HandlerContext",
    "HandlerError",
    "PermanentError",
    "Snooze",
    "handler",
    "periodic",
]
# The names of the worker's side: only a module that uses one pays for importing it.
_HANDLER_NAMES = frozenset(__all__) - {"handler", "periodic"}


def __getattr__(name: str) -> Any:  # noqa: ANN401 (what the name is)
    if name in _HANDLER_NAMES:
        from jobledger.runtime.handlers import base  # noqa: PLC0415

        return getattr(base, name)
    raise AttributeError(f"module 'jobledger' has no attribute {name!r}")
