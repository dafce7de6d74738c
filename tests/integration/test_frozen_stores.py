"""A store that stops answering without closing its connections (SIGSTOP) is an outage,
found out within seconds, not a hang (ADR 79).

The production roles run as processes on a private Redis or a private PostgreSQL
cluster, which the test freezes for a few seconds and lets go on.
"""

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from tests.integration.test_outages import logged, shared_settings
from tests.private_stores import PrivateCluster, PrivateRedis
from tests.roles import Deployment, Role, admin_client, launch, total, wait_for, wait_until_serving

from jobledger.adapters.postgres.database import PostgresDatabase
from jobledger.adapters.store import migrate, open_ledger
from jobledger.infra.outages import dependency_of
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

pytestmark = [
    pytest.mark.xdist_group("roles"),
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.slow,
]

FROZEN_SECONDS = 6.0
# A call waits at most 1 s, and a PostgreSQL call 1 s more while the server is asked
# whether it answers at all: on a busy machine, give each some room.
FOUND_OUT_SECONDS = 3.0
# The event store tries a call ten times, a fifth of a second apart.
WRITE_SECONDS = 8.0


@contextlib.contextmanager
def deployed(
    tmp_path: Path, jobledger_cli: "JobledgerCli", shared: dict[str, str]
) -> Iterator[Deployment]:
    """api, two schedulers, two workers and the projector, serving."""
    deployment = Deployment()
    try:
        launch(deployment, shared, tmp_path, jobledger_cli, "scheduler1", "scheduler2")
        wait_until_serving(deployment)
        yield deployment
    finally:
        for role in deployment.roles.values():
            role.stop()


def timed_get(client: httpx.Client, path: str) -> tuple[httpx.Response | None, float]:
    """The answer to GET ``path`` (None if none came within 10 s), and how long it took."""
    started = time.monotonic()
    try:
        response: httpx.Response | None = client.get(path, timeout=10)
    except httpx.TransportError:
        response = None
    return response, time.monotonic() - started


def said_within(role: Role, dependency: str, frozen_at: float) -> None:
    """``role`` logs dependency.down within FOUND_OUT_SECONDS of ``frozen_at``."""
    wait_for(
        lambda: bool(logged(role, "dependency.down", dependency)),
        f"{role.name} logs dependency.down {dependency}",
        timeout=max(frozen_at + FOUND_OUT_SECONDS - time.monotonic(), 0.1),
        detail=role.output,
    )


def lines(role: Role, name: str) -> list[dict[str, Any]]:
    found = []
    for line in role.output().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("event") == name:
                found.append(entry)
    return found


def check_unavailable(answer: tuple[httpx.Response | None, float]) -> None:
    response, took = answer
    assert response is not None, "no answer within 10 s"
    assert response.status_code == HTTPStatus.SERVICE_UNAVAILABLE, response.text
    assert response.headers["Retry-After"].isdigit()
    assert took < FOUND_OUT_SECONDS, took


@contextlib.contextmanager
def frozen_for(seconds: float, freeze: Callable[[], Callable[[], None]]) -> Iterator[float]:
    """Freeze a store for ``seconds``; yields when it was frozen (monotonic)."""
    thaw = freeze()
    started = time.monotonic()
    try:
        yield started
        time.sleep(max(started + seconds - time.monotonic(), 0.0))
    finally:
        thaw()


def check_said_once_and_back(deployment: Deployment, dependency: str, *names: str) -> None:
    """Each of ``names`` said the outage once, and each role that said it said its end."""
    for name in names:
        assert len(logged(deployment.roles[name], "dependency.down", dependency)) == 1

    def back() -> bool:
        return all(
            len(logged(role, "dependency.up", dependency))
            == len(logged(role, "dependency.down", dependency))
            for role in deployment.roles.values()
        )

    wait_for(back, f"every role that lost {dependency} says it is back", timeout=15)
    deployment.check_alive()


def test_a_frozen_redis_is_an_outage_within_seconds_and_one_leader_follows(
    tmp_path: Path, postgres_url: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If Redis stops answering (SIGSTOP) for 6 s, then within 3 s GET /api/v1/queues
    answers 503 with Retry-After and a worker and the leader log dependency.down once;
    the leader steps down once, and after SIGCONT every role says dependency.up and one
    scheduler is elected, none elected and stepped down again."""
    server = PrivateRedis(tmp_path)
    server.start()
    shared = shared_settings(tmp_path, postgres_url, server.url)
    try:
        with (
            deployed(tmp_path, jobledger_cli, shared) as deployment,
            admin_client(deployment.api_url) as client,
        ):
            assert client.get("/api/v1/queues").status_code == HTTPStatus.OK
            schedulers = deployment.of("scheduler")
            leader = next(s for s in schedulers if total(s.scrape(), "jobledger_leader") == 1)

            def freeze() -> Callable[[], None]:
                server.freeze()
                return server.thaw

            with frozen_for(FROZEN_SECONDS, freeze) as frozen_at:
                answer = timed_get(client, "/api/v1/queues")
                said_within(deployment.roles["worker1"], "redis", frozen_at)
                said_within(leader, "redis", frozen_at)
            check_unavailable(answer)
            wait_for(
                lambda: sum(total(s.scrape(), "jobledger_leader") for s in schedulers) == 1,
                "one scheduler leads again",
            )
            time.sleep(3.0)  # a flap would step down within a renewal or two
            check_said_once_and_back(deployment, "redis", "worker1", leader.name)
            elected = [line for s in schedulers for line in lines(s, "leader.elected")]
            stepped_down = [line for s in schedulers for line in lines(s, "leader.stepped_down")]
            assert sum(total(s.scrape(), "jobledger_leader") for s in schedulers) == 1
        # The first election, and one after the outage; one step-down between them.
        assert len(elected) == 2, elected
        assert len(stepped_down) == 1, stepped_down
        assert stepped_down[0]["reason"] == "deadline passed without a renewal"
    finally:
        server.stop()


def test_a_frozen_postgresql_is_an_outage_within_seconds(
    tmp_path: Path, redis_server: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If every process of PostgreSQL stops answering (SIGSTOP) for 6 s, then within 3 s
    a read of the API answers 503 with Retry-After and the projector logs
    dependency.down once, within 8 s a write answers 503 with Retry-After, and after
    SIGCONT every role that said so says dependency.up."""
    cluster = PrivateCluster()
    try:
        cluster.create()
        shared = shared_settings(tmp_path, cluster.url, redis_server)
        migrated = jobledger_cli.run("migrate", env=jobledger_cli.environment(**shared))
        assert migrated.returncode == 0, migrated.stderr
        with (
            deployed(tmp_path, jobledger_cli, shared) as deployment,
            admin_client(deployment.api_url) as client,
        ):
            assert client.get("/api/v1/jobs").status_code == HTTPStatus.OK

            def freeze() -> Callable[[], None]:
                frozen = cluster.freeze()
                return lambda: cluster.thaw(frozen)

            with frozen_for(FROZEN_SECONDS, freeze) as frozen_at:
                answer = timed_get(client, "/api/v1/jobs")
                said_within(deployment.roles["projector"], "postgresql", frozen_at)
                started = time.monotonic()
                post = client.post("/api/v1/executions", json={"handler": "test.echo"})
                posted = time.monotonic() - started
            check_unavailable(answer)
            # A write goes through the event store, which tries a call ten times.
            assert post.status_code == HTTPStatus.SERVICE_UNAVAILABLE, post.text
            assert post.headers["Retry-After"].isdigit()
            assert posted < WRITE_SECONDS, posted
            check_said_once_and_back(deployment, "postgresql", "projector")
            assert client.get("/api/v1/jobs").status_code == HTTPStatus.OK
    finally:
        cluster.remove()


def test_a_statement_slower_than_the_bound_goes_on_while_the_server_answers(
    postgres_url: str,
) -> None:
    """If a statement takes five times the bound on a server that answers (a rebuild,
    an archive, a wait on a lock), then it is not cut off: it completes, on a
    connection that stays usable."""
    database = PostgresDatabase(postgres_url, max_size=1, check_after=0.2)
    try:
        with database.transaction() as cursor:
            cursor.execute("SELECT pg_sleep(1.0), 7")
            assert cursor.fetchone() == ("", 7)
            cursor.execute("SELECT 8")
            assert cursor.fetchone() == (8,)
    finally:
        database.close()


def test_a_call_of_the_event_store_on_a_frozen_postgresql_fails_within_seconds(
    tmp_path: Path,
) -> None:
    """If PostgreSQL stops answering (SIGSTOP), then a read of the event store, which
    eventsourcing tries ten times, fails as an outage within 8 s instead of hanging,
    and the same ledger reads again once the server goes on."""
    cluster = PrivateCluster()
    try:
        cluster.create()
        settings = load_settings({}, database_url=cluster.url, data_dir=str(tmp_path))
        migrate(settings, progress=lambda _: None)
        ledger = open_ledger(settings)
        try:
            found: list[BaseException | int | None] = []

            def read() -> None:
                try:
                    found.append(ledger.recorder.max_notification_id())
                except Exception as error:  # noqa: BLE001 (the finding is what it raised)
                    found.append(error)

            frozen = cluster.freeze()
            try:
                reader = threading.Thread(target=read, daemon=True)
                reader.start()
                reader.join(WRITE_SECONDS)
                ended = not reader.is_alive()
            finally:
                cluster.thaw(frozen)
            reader.join(30)
            assert ended, f"the read still waited after {WRITE_SECONDS} s"
            assert isinstance(found[0], Exception), found
            assert dependency_of(found[0]) == "postgresql", found
            wait_for(lambda: ledger.recorder.max_notification_id() is None, "reads again")
        finally:
            ledger.close()
    finally:
        cluster.remove()
