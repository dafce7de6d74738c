"""One way to run a role: parts that start, stop and can be waited on, started in
order and stopped in the reverse order, whether the process is told to stop, a part
fails to start, or a part ends by itself.

Every role is such a composition: ``jobledger worker --with-projector`` is the metrics
server, the projector and the worker; ``jobledger dev`` is the projector, the scheduler,
a worker and the API. A part that ends by itself is a failure (the roles run until they
are stopped), so the others are stopped and the process exits non-zero.
"""

import asyncio
import contextlib
import gc
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import structlog

from jobledger.infra.metrics import Metrics
from jobledger.runtime.worker import Worker

log = structlog.get_logger(__name__)

EXIT_PART_ENDED = 1
_WATCH_EVERY = 0.5


class Part(Protocol):
    """Something a role runs until it is stopped."""

    @property
    def name(self) -> str: ...

    def start(self) -> None:
        """Start, and return once running (raise if it cannot)."""

    def stop(self) -> None:
        """Stop, and return once stopped (within the part's own bound)."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the part to end; True once it has."""
        ...


def run_parts(parts: Sequence[Part], stop: threading.Event) -> int:
    """Start ``parts`` in order and run until ``stop`` is set or a part ends by itself;
    then stop the started ones in reverse order. 0, or ``EXIT_PART_ENDED``."""
    with contextlib.ExitStack() as started:
        for part in parts:
            part.start()
            started.callback(_stop, part)
        settle_heap()
        ended = _first_to_end(parts, stop)
    if ended is None:
        return 0
    log.error("role.part_ended", part=ended.name)
    return EXIT_PART_ENDED


# Net allocations of tracked objects before the youngest generation is collected.
YOUNG_COLLECTION_AFTER = 20_000


def settle_heap() -> None:
    """Collect what starting left behind, then take every object still alive out of the
    collector's passes. A started role's heap (modules, classes, pools, settings) lives
    as long as the process, yet each full collection walked all of it: some 80,000
    objects, 40 to 60 ms on the 2-core machine, long enough to make a scheduler tick
    that met one miss its 50 ms. Objects made later are collected as before, but the
    youngest generation only after ``YOUNG_COLLECTION_AFTER`` more allocations than
    frees (CPython's default, 700, had a busy worker or projector start a pass every
    few milliseconds, ADR 50)."""
    gc.collect()
    gc.freeze()
    _young, *older = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, *older)


def _first_to_end(parts: Sequence[Part], stop: threading.Event) -> Part | None:
    while not stop.wait(_WATCH_EVERY):
        for part in parts:
            if part.wait(0):
                return part
    return None


def _stop(part: Part) -> None:
    try:
        part.stop()
    except Exception as error:
        log.exception("role.stop_failed", part=part.name, error=str(error))


class MetricsServer:
    """Prometheus ``/metrics`` of this process on ``host:port``, with the probes
    ``/health`` and ``/ready``."""

    name = "metrics"

    def __init__(
        self,
        metrics: Metrics,
        port: int,
        host: str,
        down: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._metrics, self._port, self._host = metrics, port, host
        self._down = down  # the stores in an outage now: what /ready answers 503 for
        self._stop: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        server, thread = self._metrics.serve(self._port, self._host, down=self._down)

        def stop() -> None:
            server.shutdown()
            server.server_close()

        self._stop, self._thread = stop, thread

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()


class WorkerRunner:
    """The asyncio worker on an event loop of its own, in a thread of its own."""

    name = "worker"

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="jobledger-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._stopping.set)
        # The worker gives running jobs its grace period, then hands them back.
        self._thread.join(self._worker.config.grace + 10)

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        await self._worker.run(self._stopping)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event that SIGINT and SIGTERM set; the previous handlers are back after."""
    import signal  # noqa: PLC0415 (only the processes that run roles handle signals)

    stop = threading.Event()
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
