"""`jobledger api`: the app behind uvicorn, with the admin account ensured first."""

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
import uvicorn
from litestar.types import ASGIApp as ASGIApplication

from jobledger.api.app import create_app
from jobledger.api.state import ApiPorts
from jobledger.infra.errors import RuntimeLayerError
from jobledger.services.application import Services

log = structlog.get_logger(__name__)


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


class ApiServer:
    """The API under uvicorn, on a thread of its own: a part of a role (uvicorn drains
    the open requests when stopped). It listens on ``listener`` if given (bound
    beforehand), else on the configured host and port; ``started`` is called once it
    listens."""

    name = "api"
    stop_timeout = 30.0

    def __init__(
        self,
        ports: ApiPorts,
        services: Services,
        *,
        listener: socket.socket | None = None,
        started: Callable[[], None] | None = None,
    ) -> None:
        settings = ports.settings
        app = create_app(ports, services)
        self._services = services
        config = server_config(app, host=settings.api_host, port=settings.api_port)
        self._server = uvicorn.Server(config)
        self._url = f"http://{settings.api_host}:{settings.api_port}"
        self._sockets = [listener] if listener is not None else None
        self._started = started
        self._thread = threading.Thread(target=self._serve, name="jobledger-api", daemon=True)

    def start(self) -> None:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeLayerError(f"the API could not listen on {self._url}; see the log")
            time.sleep(0.02)
        if self._sockets is None:
            log.info("api.listening", url=self._url)
        if self._started is not None:
            self._started()

    def stop(self) -> None:
        self._services.event_stream.close()  # open streams end: uvicorn drains the rest
        self._server.should_exit = True
        self._thread.join(self.stop_timeout)

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        # Off the main thread uvicorn installs no signal handlers: the role has them.
        with contextlib.suppress(SystemExit):  # uvicorn exits when it cannot start
            self._server.run(sockets=self._sockets)
