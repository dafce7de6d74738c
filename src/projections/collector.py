"""Pausing CPython's cyclic garbage collector around a bulk fold.

A full replay allocates millions of short-lived objects while the fold it builds grows
to hundreds of thousands of long-lived ones. Every few pages the collector traverses
the whole fold again, and that cost more than the fold itself, for nothing: the fold
holds no reference cycles, and the per-event garbage is freed by reference counting
as it goes. The pause is process-wide, so it is counted (nested or concurrent bulk
folds) and always undone; cycles made meanwhile wait for the next collection.
"""

import contextlib
import gc
import threading
from collections.abc import Iterator


class _Pauses:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.was_enabled = False


_pauses = _Pauses()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    with _pauses.lock:
        if _pauses.count == 0:
            _pauses.was_enabled = gc.isenabled()
            gc.disable()
        _pauses.count += 1
    try:
        yield
    finally:
        with _pauses.lock:
            _pauses.count -= 1
            if _pauses.count == 0 and _pauses.was_enabled:
                gc.enable()
