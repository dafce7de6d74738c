"""The budgets part of the fuzz campaign: bursts against a second app over the same
stores whose budgets are small and of their own (ADR 77), so that they run out within
a burst and the rest of the campaign is never refused.

Bursts of reads as a viewer (several at once), of reads with made-up tokens (the
address's budget), and of run-creating requests as an operator, one at a time: one
run, a batch, a backfill. Every 429 carries ``Retry-After`` and the RateLimit fields,
nothing answers 5xx, and a refused request writes nothing to the log.
"""

import contextlib
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import httpx
from tests.integration.api.fuzz_checks import Answer, Tally, Target, check_answer

from jobledger.adapters.memory.budgets import MemoryBudgets
from jobledger.adapters.redis.budgets import RedisBudgets
from jobledger.adapters.redis.client import connect as connect_redis
from jobledger.adapters.redis.keys import Keys
from jobledger.api.budgets import Gate, Limits
from jobledger.bootstrap import Container, web_app
from jobledger.domain.roles import Role
from jobledger.infra.budgets import Allowance, Budgets

if TYPE_CHECKING:
    from tests.conftest import LiveServer

US_PER_S: Final = 1_000_000
# Small enough that a burst of a second or two runs out of each of them.
LIMITS: Final = Limits(
    per_credential=Allowance(20, 2 * US_PER_S),
    per_address=Allowance(60, 2 * US_PER_S),
    runs=Allowance(8, 60 * US_PER_S),
    long_polls=2,
    login_queue=4,
)
BURST: Final = 40  # requests per burst of reads
RUN_BURST: Final = 16  # run-creating requests per burst
AT_ONCE: Final = 4
RATE_FIELDS: Final = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
READS: Final = ("/api/v1/executions", "/api/v1/jobs", "/api/v1/queues", "/api/v1/auth/me")


@contextlib.contextmanager
def budgeted(container: Container, live_server: type["LiveServer"]) -> Iterator[str]:
    """A second app over ``container`` with ``LIMITS``, its budgets under a prefix of
    their own; its URL."""
    app = web_app(container)
    state = app.state["api"]
    url = container.settings.redis_url
    client = connect_redis(url) if url else None
    budgets: Budgets = (
        MemoryBudgets()
        if client is None
        else RedisBudgets(client, Keys(f"{container.settings.redis_prefix}-budgets"))
    )
    state.gate = Gate(budgets, LIMITS, state)
    try:
        with live_server(app) as server:
            yield server.url
    finally:
        if client is not None:
            client.close()


class Bursts:
    """Requests against the budgeted app, checked as every answer of the campaign is."""

    def __init__(self, target: Target, url: str) -> None:
        self.target, self.url = target, url
        self.viewer = Tally("budgets", str(Role.VIEWER))
        self.operator = Tally("budgets", str(Role.OPERATOR))

    def client(self, token: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def reads(self) -> None:
        """Reads as a viewer, ``AT_ONCE`` at a time; then reads with made-up tokens."""
        self.viewer.cases += 1
        paths = [READS[n % len(READS)] for n in range(BURST)]
        with (
            self.client(self.target.tokens[Role.VIEWER]) as viewer,
            ThreadPoolExecutor(AT_ONCE) as pool,
        ):
            for path, response in zip(paths, pool.map(viewer.get, paths), strict=True):
                self._read(path, response)
        for _ in range(BURST // 4):
            with self.client(f"jl_{uuid.uuid4().hex}") as stranger:
                response = stranger.get("/api/v1/auth/me")
            self._counted(self.viewer, response, "GET /api/v1/auth/me (made-up token)")

    def runs(self, job_id: str, start: datetime) -> datetime:
        """Run-creating requests one at a time, the log head read around each; the start
        of the next burst's backfill windows."""
        self.operator.cases += 1
        with self.client(self.target.tokens[Role.OPERATOR]) as operator:
            for number in range(RUN_BURST):
                kind = number % 3
                if kind == 0:
                    route, path = "/api/v1/executions", "/api/v1/executions"
                    body: dict[str, Any] = {"handler": "test.echo", "payload": {"n": number}}
                elif kind == 1:
                    route, path = "/api/v1/executions:batch", "/api/v1/executions:batch"
                    body = {"runs": [{"handler": "test.echo"}] * (1 + number % 4)}
                else:
                    route = "/api/v1/jobs/{job_id}/backfill"
                    path = f"/api/v1/jobs/{job_id}/backfill"
                    end = start + timedelta(minutes=2)
                    body = {"start": start.isoformat(), "end": end.isoformat(), "max": 10}
                    start -= timedelta(hours=1)
                self._post(operator, route, path, body)
        return start

    def _post(self, client: httpx.Client, route: str, path: str, body: dict[str, Any]) -> None:
        before = self.target.probe.snapshot()
        response = client.post(path, json=body)
        after = self.target.probe.snapshot()
        sent = response.request.content
        answer = Answer("POST", route, path, sent, response.status_code, response.content)
        check_answer(self.target, self.operator, Role.OPERATOR, answer, before=before, after=after)
        self._headers(self.operator, response, answer.describe())

    def _read(self, path: str, response: httpx.Response) -> None:
        answer = Answer("GET", path, path, b"", response.status_code, response.content)
        # Several at once: the log head cannot be told apart per read (reads write none).
        snapshot = self.target.probe.snapshot()
        check_answer(self.target, self.viewer, Role.VIEWER, answer, before=snapshot, after=snapshot)
        self._headers(self.viewer, response, answer.describe())

    def _counted(self, tally: Tally, response: httpx.Response, what: str) -> None:
        tally.inputs += 1
        tally.statuses[response.status_code] += 1
        if response.status_code >= 500:
            tally.violation("5xx", f"a server error: {what} -> {response.text[:300]}")
        self._headers(tally, response, what)

    def _headers(self, tally: Tally, response: httpx.Response, what: str) -> None:
        if response.status_code != 429:
            return
        missing = [name for name in ("Retry-After", *RATE_FIELDS) if name not in response.headers]
        retry = response.headers.get("Retry-After", "")
        if missing:
            tally.violation("429 headers", f"without {', '.join(missing)}: {what}")
        elif not retry.isdigit() or int(retry) < 1:
            tally.violation("429 headers", f"Retry-After {retry!r}: {what}")


def run_budgets(
    container: Container,
    target: Target,
    live_server: type["LiveServer"],
    *,
    bursts: int,
    until: float,
) -> list[Tally]:
    """``bursts`` rounds of bursts (at least), until the monotonic time ``until``."""
    begun = time.monotonic()
    with (
        httpx.Client(base_url=target.url, headers=target.headers(Role.OPERATOR)) as main,
        budgeted(container, live_server) as url,
    ):
        job = {"name": "budgets", "handler": "test.echo"}
        schedule = {"kind": "cron", "cron": "* * * * *"}
        created = main.post("/api/v1/jobs", json=job | {"schedule": schedule})
        created.raise_for_status()
        job_id = created.json()["id"]
        part = Bursts(target, url)
        start = datetime.now(tz=UTC).replace(second=0, microsecond=0) - timedelta(days=1)
        done = 0
        while done < bursts or time.monotonic() < until:
            part.reads()
            start = part.runs(job_id, start)
            done += 1
    for tally in (part.viewer, part.operator):
        tally.seconds = time.monotonic() - begun
    return [part.viewer, part.operator]
