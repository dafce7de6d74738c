"""Reading ahead in a thread: one stage of a rebuild works while the next one waits.

A rebuild reads from the database and writes to Redis; both are mostly waiting on a
socket (which releases the GIL), so a reader thread that stays a few batches ahead
lets the two overlap instead of taking turns.
"""

import queue
import threading
from collections.abc import Generator, Iterable
from typing import Generic, TypeVar

_T = TypeVar("_T")
_PUT_TIMEOUT = 0.1  # how often a blocked reader looks whether the consumer has gone


class _Done:
    pass


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Reader(Generic[_T]):
    def __init__(self, source: Iterable[_T], depth: int) -> None:
        self.items: queue.Queue[_T | _Done | _Failed] = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self._source = source

    def run(self) -> None:
        iterator = iter(self._source)
        try:
            for item in iterator:
                if not self._put(item):
                    return
            self._put(_Done())
        except BaseException as error:  # noqa: BLE001 (handed to the consumer, raised there)
            self._put(_Failed(error))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # ends a generator's transaction in the thread that opened it

    def _put(self, item: _T | _Done | _Failed) -> bool:
        while not self.stopping.is_set():
            try:
                self.items.put(item, timeout=_PUT_TIMEOUT)
            except queue.Full:
                continue
            return True
        return False


def prefetched(
    source: Iterable[_T], *, depth: int = 2, name: str = "prefetch"
) -> Generator[_T, None, None]:
    """The items of ``source`` in order, produced by a thread up to ``depth`` ahead.

    An exception of ``source`` is raised here; closing this iterator stops the thread.
    """
    reader = _Reader(source, depth)
    thread = threading.Thread(target=reader.run, name=f"jobledger-{name}", daemon=True)
    thread.start()
    try:
        while True:
            item = reader.items.get()
            if isinstance(item, _Done):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        reader.stopping.set()
        thread.join()
