"""`jobledger api`: the app behind uvicorn, with the admin account ensured first."""

import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import structlog
import uvicorn
from litestar.types import ASGIApp as ASGIApplication

from jobledger.api.app import create_app
from jobledger.api.state import utc_now
from jobledger.runtime.bootstrap import Container

log = structlog.get_logger(__name__)

DEV_ADMIN_PASSWORD = "jobledger-dev-admin"  # noqa: S105 (printed on purpose, dev mode only)


def ensure_admin(container: Container) -> str | None:
    """Create the first admin if there is none; in dev mode, return the password to print
    when the default was used."""
    settings = container.settings
    dev = settings.mode == "dev"
    password = settings.admin_password or (DEV_ADMIN_PASSWORD if dev else None)
    user, created = container.accounts().ensure_admin(
        settings.admin_username, password, production=not dev, now=utc_now()
    )
    if created:
        log.info("api.admin_created", username=user.username)
    if created and dev and not settings.admin_password:
        return DEV_ADMIN_PASSWORD
    return None


def server_config(app: ASGIApplication, **options: Any) -> uvicorn.Config:  # noqa: ANN401 (uvicorn's own options)
    """How the app is served. ``proxy_headers=False``: uvicorn would otherwise take the
    client address from ``X-Forwarded-For`` of any local peer, before the app could judge
    the header; the app reads it from ``JOBLEDGER_TRUSTED_PROXIES`` only."""
    return uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        server_header=False,
        lifespan="on",
        proxy_headers=False,
        **options,
    )


def serve(
    container: Container,
    *,
    listener: socket.socket | None = None,
    started: Callable[[], None] | None = None,
) -> None:
    """Run until SIGINT or SIGTERM (uvicorn handles both and drains requests): on
    ``listener`` if given (bound beforehand), else on the configured host and port;
    ``started`` is called once it listens."""
    settings = container.settings
    config = server_config(create_app(container), host=settings.api_host, port=settings.api_port)
    if listener is None:
        log.info("api.listening", url=f"http://{settings.api_host}:{settings.api_port}")
    _Server(config, started).run(sockets=[listener] if listener is not None else None)


class _Server(uvicorn.Server):
    """uvicorn that reports when it listens, and ends the process with status 0 on a
    SIGTERM or SIGINT after its graceful shutdown (uvicorn re-raises the signal, which
    reads as a crash to a supervisor)."""

    def __init__(self, config: uvicorn.Config, started: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_started = started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_started is not None:
            self._on_started()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()
