"""Prometheus metrics of a jobledger process, in a registry of its own.

The composition root builds one ``Metrics`` per process and hands it to the parts
that count. Names follow Prometheus conventions (``_total`` counters, base units).
"""

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any, TypeVar, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app


def _registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


# Seconds, from a fast save or request to a slow handler run.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_DURATION = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900)
_BATCH = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000)
# The breaker gauge's values, by pybreaker state name.
BREAKER_STATES = {"closed": 0, "half-open": 1, "open": 2}


_M = TypeVar("_M", Counter, Gauge, Histogram)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=_registry)
    # Labelled children by metric and values (``labelled``).
    _children: dict[tuple[int, tuple[str, ...]], Any] = field(
        default_factory=dict, init=False, repr=False
    )

    def labelled(self, metric: _M, *values: str) -> _M:
        """``metric.labels(*values)`` (in the order of its label names), kept: labels
        checks and joins the values on every call, and a worker asks twice a job."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return cast("_M", child)

    def __post_init__(self) -> None:
        r = self.registry
        self.fires = Counter("jobledger_fires_total", "Occurrences fired.", registry=r)
        self.fires_missed = Counter(
            "jobledger_fires_missed_total",
            "Occurrences that will never fire (alert on any increase).",
            ["reason"],
            registry=r,
        )
        self.fire_conflicts = Counter(
            "jobledger_fire_conflicts_total",
            "Fires rejected because another scheduler fired first (duplicates prevented).",
            registry=r,
        )
        self.fire_lateness = Histogram(
            "jobledger_fire_lateness_seconds",
            "From an occurrence's scheduled time to its fire being saved.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
            registry=r,
        )
        self.leader = Gauge("jobledger_leader", "1 while this scheduler leads.", registry=r)
        self.leader_changes = Counter(
            "jobledger_leader_changes_total", "Leadership gained or lost.", registry=r
        )
        self.leases_expired = Counter(
            "jobledger_lease_expiries_total", "Leases that ran out without a report.", registry=r
        )
        self.queue_depth = Gauge(
            "jobledger_queue_depth", "Entries per queue and state.", ["queue", "state"], registry=r
        )
        self.queue_paused = Gauge(
            "jobledger_queue_paused",
            "1 while an operator has the queue paused (it leases nothing), else 0.",
            ["queue"],
            registry=r,
        )
        self.limit_in_use = Gauge(
            "jobledger_limit_in_use",
            "Runs holding a concurrency key, or starts of a rate key in its current window.",
            ["queue", "kind", "limit"],
            registry=r,
        )
        self.limit_waiting = Gauge(
            "jobledger_limit_waiting",
            "Due runs set aside until their limit has room.",
            ["queue", "kind", "limit"],
            registry=r,
        )
        self.limit_throttled = Counter(
            "jobledger_limit_throttled_total",
            "Runs recorded as waiting for a limit (once per run).",
            ["kind"],
            registry=r,
        )
        self.projection_lag = Gauge(
            "jobledger_projection_lag_events",
            "Events in the log that the queue projection has not applied yet.",
            registry=r,
        )
        self.dependency_up = Gauge(
            "jobledger_dependency_up",
            "1 while this process reaches the store (postgresql, redis), 0 during an outage.",
            ["dependency"],
            registry=r,
        )
        self._writer(r)
        self._worker(r)
        self._projector(r)
        self._api(r)

    def _writer(self, r: CollectorRegistry) -> None:
        self.events_appended = Counter(
            "jobledger_events_appended_total", "Events saved to the log.", ["type"], registry=r
        )
        self.append_latency = Histogram(
            "jobledger_append_latency_seconds",
            "Time of one transaction of the group-commit writer.",
            buckets=_LATENCY,
            registry=r,
        )
        self.append_batch = Histogram(
            "jobledger_append_batch_events",
            "Events per transaction of the group-commit writer.",
            buckets=_BATCH,
            registry=r,
        )

    def _worker(self, r: CollectorRegistry) -> None:
        self.leases = Counter("jobledger_leases_total", "Executions leased.", registry=r)
        self.stale_reports = Counter(
            "jobledger_stale_reports_total",
            "Outcomes rejected because the worker had lost the lease.",
            registry=r,
        )
        self.completions = Counter(
            "jobledger_completions_total",
            "Attempts ended, by handler and outcome (completed, retried, dead_lettered, "
            "deferred, handed_back).",
            ["handler", "outcome"],
            registry=r,
        )
        self.notifications = Counter(
            "jobledger_notifications_total",
            "Notifications raised by the notification rules, by rule and condition (each is "
            "a run of notify.send: its delivery shows in jobledger_completions_total).",
            ["rule", "on"],
            registry=r,
        )
        self.execution_duration = Histogram(
            "jobledger_execution_duration_seconds",
            "How long a handler ran, by handler.",
            ["handler"],
            buckets=_DURATION,
            registry=r,
        )
        self.schedule_to_start = Histogram(
            "jobledger_schedule_to_start_seconds",
            "From when an execution was due to its lease.",
            buckets=_DURATION,
            registry=r,
        )
        self.retries = Counter(
            "jobledger_retries_total", "Failed attempts with another one scheduled.", registry=r
        )
        self.dead_letters = Counter(
            "jobledger_dead_letters_total", "Executions that ran out of attempts.", registry=r
        )
        self.deferrals = Counter(
            "jobledger_deferrals_total", "Runs put off because a breaker was open.", registry=r
        )
        self.breaker_state = Gauge(
            "jobledger_breaker_state",
            "Circuit breaker per handler: 0 closed, 1 half-open, 2 open.",
            ["handler"],
            registry=r,
        )
        self.slots_in_use = Gauge(
            "jobledger_worker_slots_in_use", "Executions running in this worker.", registry=r
        )

    def _projector(self, r: CollectorRegistry) -> None:
        self.follower_position = Gauge(
            "jobledger_projection_position",
            "The log position a follower has applied, by follower.",
            ["follower"],
            registry=r,
        )
        self.follower_lag = Gauge(
            "jobledger_projection_follower_lag_events",
            "Events in the log a follower has not applied yet, by follower.",
            ["follower"],
            registry=r,
        )
        self.rebuilds = Counter(
            "jobledger_queue_rebuilds_total", "Rebuilds of the queue projection.", registry=r
        )
        self.quarantined = Counter(
            "jobledger_projection_quarantined_total",
            "Events a follower could not apply and quarantined (then went on), by follower.",
            ["follower"],
            registry=r,
        )
        self.quarantined_events = Gauge(
            "jobledger_projection_quarantined_events",
            "Events in quarantine now (until retried), by follower.",
            ["follower"],
            registry=r,
        )

    def count_quarantined(self, follower: str) -> None:
        self.quarantined.labels(follower=follower).inc()

    def _api(self, r: CollectorRegistry) -> None:
        self.http_requests = Counter(
            "jobledger_http_requests_total",
            "HTTP requests, by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "jobledger_http_request_duration_seconds",
            "HTTP request time, by method, route template and status.",
            ["method", "route", "status"],
            buckets=_LATENCY,
            registry=r,
        )
        self.login_failures = Counter(
            "jobledger_login_failures_total",
            "Sign-ins refused, by reason (credentials, throttled).",
            ["reason"],
            registry=r,
        )

    def observe_breakers(self, states: dict[str, str]) -> None:
        """Set the breaker gauge from ``Breakers.states()``."""
        for handler, state in states.items():
            self.breaker_state.labels(handler=handler).set(BREAKER_STATES.get(state, 0))

    def serve(
        self,
        port: int,
        host: str = "127.0.0.1",
        *,
        down: Callable[[], Mapping[str, str]] = dict,
    ) -> tuple[WSGIServer, threading.Thread]:
        """Serve ``host:port`` for a scheduler, worker or projector process: ``/metrics``,
        and the probes an orchestrator asks (``/health``: 200 while the process serves,
        since a role whose part ends exits; ``/ready``: 200 unless a store it uses is
        in an outage by ``down``, else 503 naming it). The server and its thread."""
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:  # noqa: ANN401 (WSGI's)
            path = environ.get("PATH_INFO", "")
            if path == "/health":
                return _json(start_response, HTTPStatus.OK, {"status": "ok"})
            if path == "/ready":
                outages = dict(down())
                status = HTTPStatus.SERVICE_UNAVAILABLE if outages else HTTPStatus.OK
                body = {"status": "down" if outages else "ok", "down": outages}
                return _json(start_response, status, body)
            return cast("Iterable[bytes]", metrics(environ, start_response))

        server = make_server(host, port, app, _ThreadingServer, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()
        return server, thread


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight never holds up the process's exit


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ANN401 (overrides)
        """Scrapes and probes every few seconds: not worth a log line each."""


def _json(start_response: Any, status: HTTPStatus, body: object) -> list[bytes]:  # noqa: ANN401 (WSGI's)
    data = json.dumps(body).encode()
    start_response(
        f"{status.value} {status.phrase}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]
