"""`jobledger dev`: the projector, the scheduler, a worker and the API in one process."""

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog

from jobledger.api.server import DEV_ADMIN_PASSWORD, ensure_admin, serve
from jobledger.api.state import utc_now
from jobledger.runtime.bootstrap import Container
from jobledger.runtime.demo import seed_demo_jobs
from jobledger.runtime.errors import SettingsError
from jobledger.runtime.scheduler import SchedulerService
from jobledger.runtime.worker import Worker

log = structlog.get_logger(__name__)

Say = Callable[[str], None]
_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}  # noqa: S104 (only compared, never bound here)


@dataclass(frozen=True)
class DevOptions:
    demo: bool = True


def run_dev(container: Container, say: Say, options: DevOptions) -> None:
    """Serve until SIGINT or SIGTERM, then stop every part in turn. The port is bound
    before anything starts, so a port in use fails at once, in one line."""
    listener = _bind(container.settings.api_host, container.settings.api_port)
    with listener, _signals_until_serving() as stopped:
        ensure_admin(container)
        if options.demo:
            _seed(container, say)
        if stopped.is_set():
            return
        with _background(container):
            serve(container, listener=listener, started=lambda: _announce(container, say))


def _bind(host: str, port: int) -> socket.socket:
    try:
        return socket.create_server((host, port))
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise SettingsError(
            f"--api-port: cannot listen on {host}:{port} ({reason}); "
            "pick another port with --api-port"
        ) from None


@contextlib.contextmanager
def _signals_until_serving() -> Iterator[threading.Event]:
    """A signal during the start-up only asks to stop; uvicorn takes the signals over
    while it serves, and the previous handlers are back afterwards."""
    stopped = threading.Event()
    previous = {
        signum: signal.signal(signum, lambda *_: stopped.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stopped
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _seed(container: Container, say: Say) -> None:
    results = seed_demo_jobs(container.ledger, at=utc_now(), by="jobledger dev")
    created = [r.name for r in results if r.outcome == "created"]
    if created:
        say(f"jobledger dev: created {len(created)} demo job(s): {', '.join(created)}")
    found = sum(r.outcome == "found" for r in results)
    if found:
        say(f"jobledger dev: {found} demo job(s) were already there")
    for result in results:
        if result.outcome == "skipped":
            say(f"jobledger dev: skipped the demo job {result.name!r}: {result.reason}")


def _announce(container: Container, say: Say) -> None:
    settings = container.settings
    host = "127.0.0.1" if settings.api_host in _WILDCARD_HOSTS else settings.api_host
    if ":" in host:
        host = f"[{host}]"
    say(f"jobledger dev: dashboard at http://{host}:{settings.api_port}/ui")
    password = (
        "the one in JOBLEDGER_ADMIN_PASSWORD"
        if settings.admin_password
        else f"{DEV_ADMIN_PASSWORD!r} (unless it was changed since)"
    )
    say(f"jobledger dev: log in as {settings.admin_username!r} with the password {password}")
    say("jobledger dev: press Ctrl+C to stop; the event log stays in " + str(settings.sqlite_path))


@contextlib.contextmanager
def _background(container: Container) -> Iterator[None]:
    """The projector first (it rebuilds the in-memory queue from the log), then the
    scheduler and the worker; stopped in the reverse order."""
    projector = container.projector()
    projector.start()
    scheduler = SchedulerService(container.scheduler(), health=container.health)
    worker = _WorkerThread(container.worker())
    try:
        scheduler.start()
        try:
            worker.start()
            try:
                yield
            finally:
                worker.stop()
        finally:
            scheduler.stop()
    finally:
        projector.stop()
        log.info("dev.stopped")


class _WorkerThread:
    """The asyncio worker on its own event loop, in a thread of its own."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="jobledger-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        # The worker gives running jobs its grace period, then hands them back.
        self._thread.join(self._worker.config.grace + 10)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await self._worker.run(self._stop)
