"""A bell: one process says that something happened, others that listen act at once
instead of at their next poll (the ``Bell`` port).

A ring names what happened (queues where runs became ready; that the read models
moved); a listener names what it listens for. A ring can be lost (a dropped connection,
a listener that subscribed a moment late, a failed ring): every listener still polls,
so a lost ring only delays. A listener that (re)connects is woken once, for whatever
rang meanwhile.
"""

from collections.abc import Callable, Collection, Sequence
from typing import Protocol


class Listening(Protocol):
    """A listener on some names; ``close`` ends it."""

    def close(self) -> None: ...


class Bell(Protocol):
    """Rings names, to whoever listens for them."""

    def ring(self, names: Collection[str]) -> None:
        """Tell the listeners of any of ``names`` that it happened."""
        ...

    def listen(self, names: Sequence[str], woken: Callable[[], None]) -> Listening:
        """Call ``woken`` (from a thread of the bell's) after each ring of one of
        ``names``, and once whenever it (re)connects, until closed."""
        ...

    def close(self) -> None:
        """Close every listener still open (the process is done with the bell)."""
        ...
