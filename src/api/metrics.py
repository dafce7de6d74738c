"""Counts and times every HTTP request, by method, route template and status."""

import time

from litestar.enums import ScopeType
from litestar.middleware import MiddlewareProtocol
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import dependency_of

# Requests the router matched no route for never reach route middleware; this label is
# for the rest that carry no template.
UNMATCHED = "unmatched"


class MetricsMiddleware(MiddlewareProtocol):
    """The outermost route middleware, so it also sees requests the auth refuses."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_counting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        except Exception as error:
            # Raised by a middleware below (auth): the exception handler answers outside,
            # with a 503 for an unreachable store.
            status = getattr(error, "status_code", 503 if dependency_of(error) else 500)
            raise
        finally:
            self._record(scope, status, time.perf_counter() - started)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("path_template") or UNMATCHED
        method = scope.get("method", "GET")
        labels = {"method": method, "route": route, "status": str(status)}
        self._metrics.http_requests.labels(**labels).inc()
        self._metrics.http_latency.labels(**labels).observe(seconds)
