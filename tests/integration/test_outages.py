"""Outages of Redis and PostgreSQL under the production roles, run as real processes.

The api, a scheduler, two workers and the projector run on a private store while
executions are created over HTTP and run. Redis is killed with -9 and started again
empty; a private PostgreSQL cluster is stopped and started again. No role may exit,
work must resume by itself, and nothing accepted may be lost.
"""

import contextlib
import functools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

import httpx
import pytest
from tests.private_stores import PrivateCluster, PrivateRedis
from tests.roles import (
    Deployment,
    Role,
    admin_client,
    launch,
    total,
    wait_for,
    wait_until_serving,
)

from jobledger.adapters.store import open_ledger
from jobledger.domain.execution import ExecutionStatus, trigger_execution_id
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

pytestmark = [
    pytest.mark.xdist_group("roles"),
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.slow,
]

OUTAGE_SECONDS = 5.0


# ---- the roles and the load --------------------------------------------------------


@dataclass
class Load:
    """Creates an ad-hoc execution over HTTP every ``every`` seconds, each with an
    Idempotency-Key, until stopped; remembers what each request got."""

    api_url: str
    every: float = 0.1
    accepted: dict[str, str] = field(default_factory=dict)  # key -> execution id
    refused: dict[str, httpx.Response] = field(default_factory=dict)  # key -> 503
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No more requests; returns once the last one was answered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        with admin_client(self.api_url) as client:
            client.timeout = httpx.Timeout(60)
            while not self._stop.wait(self.every):
                self.submit(client, uuid.uuid4().hex)

    def submit(self, client: httpx.Client, key: str | None) -> httpx.Response | None:
        key = key or uuid.uuid4().hex
        try:
            response = client.post(
                "/api/v1/executions",
                json={"handler": "test.echo", "payload": {"key": key}},
                headers={"Idempotency-Key": key},
            )
        except httpx.TransportError as error:
            self.failures.append(f"{key}: {type(error).__name__}")
            return None
        self.statuses[response.status_code] += 1
        if response.status_code == HTTPStatus.ACCEPTED:
            self.accepted[key] = response.json()["id"]
        elif response.status_code == HTTPStatus.SERVICE_UNAVAILABLE:
            self.refused[key] = response
        else:
            self.failures.append(f"{key}: {response.status_code} {response.text}")
        return response


def shared_settings(tmp_path: Path, database_url: str, redis_url: str) -> dict[str, str]:
    return {
        "database_url": database_url,
        "redis_url": redis_url,
        "redis_prefix": f"o{uuid.uuid4().hex[:8]}",
        "data_dir": str(tmp_path / "data"),
        "projection_poll_ms": "100",
        "leader_ttl_ms": "1500",
        "leader_renew_ms": "500",
        "leader_poll_ms": "200",
        "log_format": "json",
    }


@contextlib.contextmanager
def under_load(
    tmp_path: Path, jobledger_cli: "JobledgerCli", shared: dict[str, str]
) -> Iterator[tuple[Deployment, Load]]:
    """api, a scheduler, two workers and the projector, serving, with executions being
    created and run."""
    deployment = Deployment()
    try:
        launch(deployment, shared, tmp_path, jobledger_cli, "scheduler1")
        wait_until_serving(deployment)
        with Load(deployment.api_url) as load:
            wait_for(lambda: len(load.accepted) >= 10, "executions accepted before the outage")
            yield deployment, load
    finally:
        for role in deployment.roles.values():
            role.stop()


Answer = httpx.Response | None


def outage(
    deployment: Deployment,
    dependency: str,
    stop: Callable[[], None],
    start: Callable[[], None],
    request: Callable[[httpx.Client], Answer],
) -> None:
    """Stop a store for OUTAGE_SECONDS and start it again. Meanwhile /ready and a
    ``request`` that needs the store answer 503 (with Retry-After, never 500), and by
    the end the API's gauge says the store is down."""
    with admin_client(deployment.api_url) as client:  # signed in while the store is up
        stop()
        seen = during(
            OUTAGE_SECONDS, deployment, lambda: (ready(deployment.api_url), request(client))
        )
        api = deployment.roles["api"].scrape()
        start()
    assert total(api, "jobledger_dependency_up", dependency=dependency) == 0
    not_ready = [r for r, _ in seen if r is not None and r.status_code == 503]
    assert not_ready, [r.status_code if r else None for r, _ in seen]
    assert all(dependency in r.json()["unreachable"] for r in not_ready)
    answers = [a for _, a in seen if a is not None]
    statuses = [a.status_code for a in answers]
    assert HTTPStatus.SERVICE_UNAVAILABLE in statuses, statuses
    ok = {HTTPStatus.OK, HTTPStatus.ACCEPTED, HTTPStatus.SERVICE_UNAVAILABLE}
    assert set(statuses) <= ok, statuses
    assert all(a.headers["Retry-After"].isdigit() for a in answers if a.status_code == 503)


def get(client: httpx.Client, path: str) -> Answer:
    try:
        return client.get(path, timeout=10)
    except httpx.TransportError:
        return None


def check_back_up(deployment: Deployment, dependency: str) -> None:
    """Every role's gauge says the store is back, and the API counted no 500."""

    def up() -> bool:
        samples = [role.scrape() for role in deployment.roles.values()]
        return all(total(s, "jobledger_dependency_up", dependency=dependency) == 1 for s in samples)

    wait_for(up, f"every role sees {dependency} again")
    api = deployment.roles["api"].scrape()
    assert total(api, "jobledger_http_requests_total", status="500") == 0


def logged(role: Role, name: str, dependency: str) -> list[dict[str, Any]]:
    """The JSON lines of ``role`` with event ``name`` about ``dependency``."""
    found = []
    for line in role.output().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and (entry.get("event"), entry.get("dependency")) == (
                name,
                dependency,
            ):
                found.append(entry)
    return found


def check_nothing_lost(database_url: str, execution_ids: Iterable[str]) -> None:
    """Every execution of ``execution_ids`` ends Completed."""
    ledger = open_ledger(load_settings({}, database_url=database_url))
    waiting = {uuid.UUID(i) for i in execution_ids}
    count = len(waiting)

    def done() -> bool:
        finished = {
            i for i in waiting if ledger.get_execution(i).status is ExecutionStatus.COMPLETED
        }
        waiting.difference_update(finished)
        return not waiting

    try:
        wait_for(done, f"the {count} accepted executions completed", timeout=40)
    finally:
        ledger.close()


def start_long_runs(api_url: str, database_url: str, seconds: float) -> list[str]:
    """Four executions of test.delay, each running (leased) when this returns."""
    with admin_client(api_url) as client:
        ids = []
        for _ in range(4):
            response = client.post(
                "/api/v1/executions",
                json={"handler": "test.delay", "payload": {"seconds": seconds}},
            )
            assert response.status_code == HTTPStatus.ACCEPTED, response.text
            ids.append(response.json()["id"])
    ledger = open_ledger(load_settings({}, database_url=database_url))
    try:
        wait_for(
            lambda: all(
                ledger.get_execution(uuid.UUID(i)).status is ExecutionStatus.RUNNING for i in ids
            ),
            "the long runs are running",
        )
    finally:
        ledger.close()
    return ids


def check_ran_through(database_url: str, ids: list[str]) -> None:
    """Each run was leased once and completed in that attempt: it ran through the
    outage and its outcome was saved afterwards, none was retried."""
    ledger = open_ledger(load_settings({}, database_url=database_url))
    try:
        for execution_id in ids:
            names = Counter(type(e).__name__ for e in ledger.history(uuid.UUID(execution_id)))
            assert names["Leased"] == 1, names
            assert names["Completed"] == 1, names
            assert sum(names.values()) == 3, names  # enqueued, leased, completed
    finally:
        ledger.close()


def check_whole_or_nothing(database_url: str, keys: list[str], *, retried: bool = False) -> None:
    """Each request refused with 503 left its execution absent or whole (one
    ExecutionEnqueued with the request's payload); after the retry, present once."""
    ledger = open_ledger(load_settings({}, database_url=database_url))
    try:
        for key in keys:
            history = list(ledger.history(trigger_execution_id(None, key)))
            assert [type(e).__name__ for e in history].count("Enqueued") <= 1, history
            if retried:
                assert history, key
            if history:
                assert type(history[0]).__name__ == "Enqueued"
                assert ledger.get_execution(history[0].originator_id).spec.payload == {"key": key}
    finally:
        ledger.close()


def check_outage_said_once(deployment: Deployment, dependency: str) -> None:
    """The roles that noticed the outage said so in a line or two, not one per try, and
    said when it ended."""
    noticed = []
    for role in deployment.roles.values():
        down = logged(role, "dependency.down", dependency)
        up = logged(role, "dependency.up", dependency)
        assert len(down) <= 3, f"{role.name}: {down}"
        assert len(up) == len(down), f"{role.name}: {down} {up}"
        if down:
            noticed.append(role.name)
    assert len(noticed) >= 3, noticed


def check_queue_verifies(jobledger_cli: "JobledgerCli", shared: dict[str, str]) -> None:
    environ = jobledger_cli.environment(**shared)

    def clean() -> bool:
        result = jobledger_cli.run("queue", "verify", env=environ)
        return result.returncode == 0 and "the queue matches the log" in result.stdout

    wait_for(clean, "jobledger queue verify finds no difference", timeout=20)


T = TypeVar("T")


def during(seconds: float, deployment: Deployment, check: Callable[[], T]) -> list[T]:
    """Call ``check`` every half second for ``seconds``, each role alive each time."""
    seen: list[T] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        deployment.check_alive()
        seen.append(check())
        time.sleep(0.5)
    return seen


def ready(api_url: str) -> Answer:
    try:
        return httpx.get(f"{api_url}/ready", timeout=10)
    except httpx.TransportError:
        return None


# ---- the tests ---------------------------------------------------------------------


def test_every_role_rides_out_a_redis_restart_that_lost_its_data(
    tmp_path: Path, postgres_url: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If Redis is killed with -9 under load and started again empty 5 s later, then no
    role exits, /ready answers 503 naming redis meanwhile, leasing resumes within a few
    seconds, every accepted execution completes, and `queue verify` is clean."""
    server = PrivateRedis(tmp_path)
    server.start()
    shared = shared_settings(tmp_path, postgres_url, server.url)
    try:
        with under_load(tmp_path, jobledger_cli, shared) as (deployment, load):
            long_runs = start_long_runs(deployment.api_url, postgres_url, OUTAGE_SECONDS - 2)
            workers = functools.partial(get, path="/api/v1/workers")
            outage(deployment, "redis", server.kill, server.start, workers)
            restarted = time.monotonic()
            with admin_client(deployment.api_url) as client:
                probe = client.post("/api/v1/executions", json={"handler": "test.echo"})
            assert probe.status_code == HTTPStatus.ACCEPTED, probe.text
            check_nothing_lost(postgres_url, [probe.json()["id"]])
            resumed = time.monotonic() - restarted
            during(1.0, deployment, lambda: None)
            load.stop()
            check_nothing_lost(postgres_url, load.accepted.values())
            check_nothing_lost(postgres_url, long_runs)
            check_ran_through(postgres_url, long_runs)
            check_queue_verifies(jobledger_cli, shared)
            check_back_up(deployment, "redis")
            deployment.check_alive()
        assert resumed < 10, resumed  # a few seconds, on a busy machine
        assert load.failures == [], load.failures
        assert load.refused == {}, "new executions wait in the log while Redis is down"
        check_outage_said_once(deployment, "redis")
    finally:
        server.stop()


def test_every_role_rides_out_a_postgresql_restart(
    tmp_path: Path, redis_server: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If PostgreSQL is stopped for 5 s under load and started again, then no role exits,
    the API answers 503 with Retry-After (never 500) while it is down and /ready names
    postgresql, a request refused with 503 is safe to repeat with its Idempotency-Key,
    and every accepted execution completes."""
    cluster = PrivateCluster()
    try:
        cluster.create()
        shared = shared_settings(tmp_path, cluster.url, redis_server)
        migrated = jobledger_cli.run("migrate", env=jobledger_cli.environment(**shared))
        assert migrated.returncode == 0, migrated.stderr
        with under_load(tmp_path, jobledger_cli, shared) as (deployment, load):
            # They finish while the store is down: their outcomes wait in the workers.
            long_runs = start_long_runs(deployment.api_url, cluster.url, OUTAGE_SECONDS - 2)
            # A POST sent while the store is down is refused; the load's may also wait.
            post = functools.partial(load.submit, key=None)
            outage(deployment, "postgresql", cluster.stop, cluster.start, post)
            assert load.refused, load.statuses
            wait_for(lambda: (r := ready(deployment.api_url)) is not None and r.is_success, "ready")
            accepted_after = len(load.accepted)
            wait_for(lambda: len(load.accepted) > accepted_after + 5, "executions accepted after")
            load.stop()
            check_whole_or_nothing(cluster.url, list(load.refused))
            with admin_client(deployment.api_url) as client:
                # Refused during the outage, then sent again with the same key.
                for key in list(load.refused):
                    again = load.submit(client, key)
                    assert again is not None
                    assert again.status_code == HTTPStatus.ACCEPTED, again.text
                    assert again.json()["id"] == str(trigger_execution_id(None, key))
            check_whole_or_nothing(cluster.url, list(load.refused), retried=True)
            check_nothing_lost(cluster.url, load.accepted.values())
            check_nothing_lost(cluster.url, long_runs)
            check_ran_through(cluster.url, long_runs)
            check_queue_verifies(jobledger_cli, shared)
            check_back_up(deployment, "postgresql")
            deployment.check_alive()
        assert load.failures == [], load.failures
        # A POST either waited for the store and was saved (202) or was refused (503).
        assert set(load.statuses) <= {HTTPStatus.ACCEPTED, HTTPStatus.SERVICE_UNAVAILABLE}
        assert all(r.headers["Retry-After"].isdigit() for r in load.refused.values())
        check_outage_said_once(deployment, "postgresql")
    finally:
        cluster.remove()
