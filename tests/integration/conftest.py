"""Integration fixtures: a private redis-server (and a private Redis Cluster), and
workers as real processes.

The redis-server listens on a free loopback port with persistence off, so the tests
never touch a Redis the machine runs for itself. The ``harness`` fixture runs a ledger
with its projector and scheduler in this process and starts ``jobledger worker``
subprocesses on it.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from tests.conftest import CHEAP_PASSWORDS, actor
from tests.integration.executions import LogReads, adhoc_spec
from tests.redis_cluster import PrivateRedisCluster

from jobledger.adapters.store import open_ledger
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.infra.settings import Settings, load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.runtime.scheduler import SchedulerConfig, SchedulerService
from jobledger.schemas.executions import MAX_BATCH_RUNS, ExecutionRef
from jobledger.services.executions import BatchRun, Executions


@pytest.fixture
def postgres_ledger(postgres_url: str) -> Iterator[Ledger]:
    """A ledger on a fresh PostgreSQL database of its own."""
    opened = open_ledger(load_settings({}, database_url=postgres_url))
    yield opened
    opened.close()


@pytest.fixture
def redis_client(redis_server: str) -> Iterator[redis.Redis]:
    """A client on the private server, which is emptied before each test."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedisCluster]:
    """A private three-master Redis Cluster for this session, stopped after."""
    cluster = PrivateRedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_client(redis_cluster: PrivateRedisCluster) -> Iterator[RedisCluster]:
    """A client of the private Redis Cluster, whose masters are emptied before each test."""
    with redis_cluster.client() as client:
        client.flushall(target_nodes=RedisCluster.PRIMARIES)
        yield client


class WorkerProcess:
    """A `jobledger worker` subprocess whose log goes to a file (a pipe could fill up)."""

    def __init__(self, command: list[str], environ: dict[str, str]) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(  # noqa: S603 (our own entry point)
            command, env=environ, stdout=subprocess.DEVNULL, stderr=self.log
        )
        self._text: str | None = None

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def terminate_and_wait(self, timeout: float) -> int:
        self.process.terminate()
        return self.process.wait(timeout)

    def stop(self) -> str:
        """Stop the worker if it runs; returns its log, the same text on every call."""
        if self._text is not None:
            return self._text
        process = self.process
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.log.seek(0)
        self._text = self.log.read().decode()
        self.log.close()
        return self._text


class Harness(LogReads):
    """A ledger on PostgreSQL and Redis with its projector and scheduler running here,
    and the worker subprocesses started on it."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.workers: list[WorkerProcess] = []
        self.scheduler: SchedulerService | None = None

    def start_worker(self, **settings: str) -> WorkerProcess:
        """A worker on this ledger; ``settings`` become ``JOBLEDGER_<NAME>`` variables."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
        environ |= {
            "JOBLEDGER_DATABASE_URL": self.container.settings.database_url,
            "JOBLEDGER_REDIS_URL": self.container.settings.redis_url,
            "JOBLEDGER_REDIS_PREFIX": self.container.settings.redis_prefix,
            "JOBLEDGER_LOG_FORMAT": "json",
            "JOBLEDGER_TEST_HANDLERS": "true",
        }
        environ |= {f"JOBLEDGER_{k.upper()}": v for k, v in settings.items()}
        worker = WorkerProcess([sys.executable, "-m", "jobledger.cli", "worker"], environ)
        self.workers.append(worker)
        return worker

    def run(
        self,
        handler: str,
        *,
        retries: int = 3,
        ready_at: datetime | None = None,
        **payload: Any,
    ) -> Execution:
        """An ad-hoc execution of ``handler``, ready now unless ``ready_at`` says later."""
        spec = adhoc_spec(
            handler,
            payload,
            retries=retries,
            backoff=timedelta(milliseconds=500),
            max_backoff=timedelta(seconds=5),
        )
        at = ready_at or datetime.now(tz=UTC)
        return Executions(self.container.ledger).run(spec, key=uuid.uuid4().hex, at=at, by=actor())

    def run_many(
        self, runs: Sequence[tuple[str, dict[str, Any]]], *, ready_at: datetime | None = None
    ) -> list[ExecutionRef]:
        """Ad-hoc executions of (handler, payload) pairs, as ``run`` makes them, ready
        now unless ``ready_at`` says later: saved a thousand at a time (a transaction
        each) rather than one save each."""
        at = ready_at or datetime.now(tz=UTC)
        batch = [
            BatchRun(
                adhoc_spec(
                    handler,
                    payload,
                    retries=3,
                    backoff=timedelta(milliseconds=500),
                    max_backoff=timedelta(seconds=5),
                ),
                uuid.uuid4().hex,
                at,
            )
            for handler, payload in runs
        ]
        executions = Executions(self.container.ledger)
        return [
            ref
            for start in range(0, len(batch), MAX_BATCH_RUNS)
            for ref in executions.run_many(
                batch[start : start + MAX_BATCH_RUNS], by=actor()
            ).executions
        ]

    def wait_for_all(
        self,
        executions: Iterable[Execution | ExecutionRef],
        status: ExecutionStatus,
        timeout: float,
    ) -> None:
        """Wait until every execution has ``status``; an execution is read again only
        until it gets there, so a long list costs little to poll."""
        waiting = [e.id for e in executions]

        def arrived() -> bool:
            waiting[:] = [i for i in waiting if self.status(i) is not status]
            return not waiting

        self.wait_for(arrived, timeout)

    @staticmethod
    def wait_for(condition: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"not within {timeout} s")
            time.sleep(0.05)


def harness_settings(postgres_url: str, redis_url: str, prefix: str = "w") -> Settings:
    """Settings for a harness: quick polls and a short-lived leader lock, on a Redis
    key space of its own."""
    return load_settings(
        {},
        test_handlers="true",
        database_url=postgres_url,
        redis_url=redis_url,
        redis_prefix=f"{prefix}{uuid.uuid4().hex[:8]}",
        projection_poll_ms="100",
        leader_ttl_ms="1000",
        leader_renew_ms="300",
        leader_poll_ms="100",
        **CHEAP_PASSWORDS,
    )


@contextlib.contextmanager
def running_harness(settings: Settings) -> Iterator[Harness]:
    """A harness on ``settings``'s stores with its projector and scheduler running
    (``Harness.scheduler``), its workers and both stopped after."""
    with bootstrap(settings) as built:
        projector = built.projector()
        projector.start()
        service = SchedulerService(built.scheduler(config=SchedulerConfig(recover_interval=0.2)))
        service.start()
        running = Harness(built)
        running.scheduler = service
        try:
            yield running
        finally:
            for worker in running.workers:
                worker.stop()
            service.stop()
            projector.stop()


@pytest.fixture
def harness(postgres_url: str, redis_server: str) -> Iterator[Harness]:
    with running_harness(harness_settings(postgres_url, redis_server)) as running:
        yield running
