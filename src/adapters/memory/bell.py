"""The ``Bell`` within one process (`jobledger dev`, tests): a ring calls the listeners
of its names directly."""

import threading
from collections.abc import Callable, Collection, Sequence


class MemoryBell:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[int, tuple[frozenset[str], Callable[[], None]]] = {}
        self._next = 0

    def ring(self, names: Collection[str]) -> None:
        with self._lock:
            listeners = list(self._listeners.values())
        for served, woken in listeners:
            if not served.isdisjoint(names):
                woken()

    def listen(self, names: Sequence[str], woken: Callable[[], None]) -> "MemoryListening":
        with self._lock:
            self._next += 1
            key = self._next
            self._listeners[key] = (frozenset(names), woken)
        woken()  # as a listener that just connected: whatever came before, look now
        return MemoryListening(self, key)

    def close(self) -> None:
        with self._lock:
            self._listeners.clear()

    def _forget(self, key: int) -> None:
        with self._lock:
            self._listeners.pop(key, None)


class MemoryListening:
    def __init__(self, signal: MemoryBell, key: int) -> None:
        self._signal = signal
        self._key = key

    def close(self) -> None:
        self._signal._forget(self._key)  # noqa: SLF001 (its own signal's bookkeeping)
