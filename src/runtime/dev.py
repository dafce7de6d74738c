"""`jobledger dev`: the projector, the scheduler, a worker and the API in one process."""

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from jobledger.domain.clock import utc_now
from jobledger.infra.errors import SettingsError
from jobledger.infra.settings import Settings, mask_url
from jobledger.runtime.lifecycle import Part, run_parts, stop_on_signals
from jobledger.services.accounts import DEV_ADMIN_PASSWORD
from jobledger.services.actors import operator_of_store
from jobledger.services.application import Services
from jobledger.services.demo import Seeded, seed_demo_jobs

log = structlog.get_logger(__name__)

Say = Callable[[str], None]
_WILDCARD_HOSTS = {"0.0.0.0", "::", ""}  # noqa: S104 (only compared, never bound here)


@dataclass(frozen=True)
class DevOptions:
    demo: bool = True


# The parts of the dev role (``roles.ROLES["dev"]``), built by the composition root
# around the API's bound listener; the callable is called once the API listens.
DevParts = Callable[[socket.socket, Callable[[], None]], list[Part]]


def run_dev(
    settings: Settings, services: Services, parts: DevParts, say: Say, options: DevOptions
) -> int:
    """Serve until SIGINT or SIGTERM, then stop every part in turn. The port is bound
    before anything starts, so a port in use fails at once, in one line."""
    listener = _bind(settings.api_host, settings.api_port)
    with listener, stop_on_signals() as stop:
        services.accounts.ensure_admin(settings, at=utc_now())
        if options.demo:
            _seed(services, say)
        if stop.is_set():
            return 0
        code = run_parts(parts(listener, lambda: _announce(settings, say)), stop)
    log.info("dev.stopped")
    return code


def _bind(host: str, port: int) -> socket.socket:
    try:
        return socket.create_server((host, port))
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise SettingsError(
            f"--api-port: cannot listen on {host}:{port} ({reason}); "
            "pick another port with --api-port"
        ) from None


def _seed(services: Services, say: Say) -> None:
    by = operator_of_store("jobledger dev")
    results = seed_demo_jobs(services.jobs, at=utc_now(), by=by)
    created = [r.name for r in results if r.outcome is Seeded.CREATED]
    if created:
        say(f"jobledger dev: created {len(created)} demo job(s): {', '.join(created)}")
    found = sum(r.outcome is Seeded.FOUND for r in results)
    if found:
        say(f"jobledger dev: {found} demo job(s) were already there")
    for result in results:
        if result.outcome is Seeded.SKIPPED:
            say(f"jobledger dev: skipped the demo job {result.name!r}: {result.reason}")


def _announce(settings: Settings, say: Say) -> None:
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
    where = mask_url(settings.database_url) if settings.uses_postgres else str(settings.sqlite_path)
    say(f"jobledger dev: press Ctrl+C to stop; the event log stays in {where}")
