"""Awaiting many thread-pool futures from one event loop, one wake-up per burst.

``asyncio.wrap_future`` wakes the event loop once for every future that completes in
another thread (a write to the loop's self-pipe, a pass of the loop, a callback). The
group-commit writer completes the futures of a whole batch at once, so a worker that
awaited each outcome's save that way woke its loop once per job. ``FutureBridge``
gathers the completions that arrive while a hand-over is pending and settles them all
in one pass of the loop.
"""

import asyncio
import collections
import concurrent.futures
import functools
import threading
from typing import Any, TypeVar

T = TypeVar("T")


class FutureBridge:
    """Hands ``concurrent.futures.Future`` results to awaiting tasks of one loop.

    ``wait`` is called on the loop's thread. Unlike ``wrap_future``, cancelling the
    awaiting task leaves the source future alone: a save handed to the writer goes on.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._done: collections.deque[_Pair] = collections.deque()
        self._lock = threading.Lock()
        self._handing_over = False
        self.wake_ups = 0  # passes of the loop that settled futures, for tests and metrics

    def wait(self, future: concurrent.futures.Future[T]) -> asyncio.Future[T]:
        """An asyncio future that settles as ``future`` does."""
        waiter: asyncio.Future[T] = self._loop.create_future()
        future.add_done_callback(functools.partial(self._completed, waiter))
        return waiter

    def _completed(
        self, waiter: asyncio.Future[Any], future: concurrent.futures.Future[Any]
    ) -> None:
        """In the thread that completed ``future``: queue it, and wake the loop unless a
        hand-over is pending already (it takes this one too)."""
        self._done.append((future, waiter))
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            if self._handing_over:
                return
            self._handing_over = True
        self._loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        # Cleared first: a completion queued from now on schedules a pass of its own.
        with self._lock:
            self._handing_over = False
        self.wake_ups += 1
        while self._done:
            future, waiter = self._done.popleft()
            if waiter.cancelled():
                continue
            try:
                _settle(waiter, future)
            except Exception as error:  # noqa: BLE001 (no waiter may hang on another's fault)
                # An error asyncio refuses to carry (StopIteration) still ends the wait.
                waiter.set_exception(RuntimeError(f"the awaited call failed: {error!r}"))


_Pair = tuple[concurrent.futures.Future[Any], asyncio.Future[Any]]


def _settle(waiter: asyncio.Future[Any], future: concurrent.futures.Future[Any]) -> None:
    if future.cancelled():
        waiter.cancel()
        return
    error = future.exception()
    if error is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(future.result())
