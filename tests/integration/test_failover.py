"""Scheduler fail-over with real processes: kill -9 and SIGSTOP of the leader."""

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.conftest import actor

from jobledger.adapters.redis.keys import Keys
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.schedules import OneShotSchedule
from jobledger.infra.settings import load_settings
from jobledger.services.jobs import Jobs

TTL_MS = 1000

# Role processes on the shared PostgreSQL: one such module at a time (its connections).
pytestmark = pytest.mark.xdist_group("roles")


@pytest.fixture
def container(postgres_url: str, redis_server: str) -> Iterator[Container]:
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=postgres_url,
        redis_url=redis_server,
        redis_prefix=f"f{uuid.uuid4().hex[:8]}",
    )
    with bootstrap(settings) as built:
        yield built


def start_scheduler(container: Container, log: Path | None = None) -> subprocess.Popen[bytes]:
    """A `jobledger scheduler` process; its log goes to ``log`` if given (JSON lines)."""
    settings = container.settings
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    environ |= {
        "JOBLEDGER_DATABASE_URL": settings.database_url,
        "JOBLEDGER_REDIS_URL": settings.redis_url,
        "JOBLEDGER_REDIS_PREFIX": settings.redis_prefix,
        "JOBLEDGER_TEST_HANDLERS": "true",
        "JOBLEDGER_LEADER_TTL_MS": str(TTL_MS),
        "JOBLEDGER_LEADER_RENEW_MS": str(TTL_MS // 3),
        "JOBLEDGER_LEADER_POLL_MS": "100",
        "JOBLEDGER_SCHEDULER_TICK_MS": "20",
    }
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(log.open("wb")) if log else subprocess.DEVNULL
        return subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", "scheduler"],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def one_shots(container: Container, start: datetime, count: int, step: float) -> list[Job]:
    """``count`` one-shot jobs due every ``step`` seconds from ``start``."""
    return [
        Jobs(container.ledger).schedule(
            JobDefinition(
                name=f"once {i}",
                spec=ExecutionSpec(handler="test.echo"),
                schedule=OneShotSchedule(start + timedelta(seconds=i * step)),
            ),
            at=datetime.now(tz=UTC),
            by=actor("test"),
        )
        for i in range(count)
    ]


def fires(container: Container) -> list[Any]:
    notifications = container.ledger.recorder.select_notifications(
        start=1, limit=100_000, topics=[Job.Fired.TOPIC]
    )
    return [container.ledger.mapper.to_domain_event(n) for n in notifications]


def leader_pid(container: Container) -> int | None:
    client = redis.Redis.from_url(container.settings.redis_url)
    try:
        token = client.get(Keys(container.settings.redis_prefix).leader)
    finally:
        client.close()
    if token is None:
        return None
    text = token.decode() if isinstance(token, bytes) else token
    return int(text.rsplit("-", 2)[-2])


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s")
        time.sleep(0.05)


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def test_kill_9_of_the_leader_fails_over_within_the_bound(container: Container) -> None:
    """If the leader is killed with -9, then the standby fires the next occurrences; none
    is lost or doubled and the worst lateness stays under 5 s."""
    start = datetime.now(tz=UTC) + timedelta(seconds=3)
    jobs = one_shots(container, start, count=24, step=0.5)
    processes = [start_scheduler(container), start_scheduler(container)]
    try:
        wait_for(lambda: leader_pid(container) is not None, 10)
        wait_for(lambda: len(fires(container)) >= 6, 20)
        victim = leader_pid(container)
        os.kill(victim or 0, signal.SIGKILL)
        wait_for(lambda: len(fires(container)) >= len(jobs), 30)
        assert leader_pid(container) not in {None, victim}
    finally:
        stop_all(processes)
    recorded = fires(container)
    assert Counter(e.originator_id for e in recorded) == Counter({j.id: 1 for j in jobs})
    lateness = [(e.timestamp - vars(e)["scheduled_for"]).total_seconds() for e in recorded]
    assert min(lateness) >= 0  # never early
    assert max(lateness) < 5
    assert len({vars(e)["leader_epoch"] for e in recorded}) == 2


def test_a_paused_leader_steps_down_without_firing(container: Container) -> None:
    """If the leader is paused (SIGSTOP) past its ttl while a standby takes over, then
    after it resumes it fires nothing, and no occurrence fires twice."""
    start = datetime.now(tz=UTC) + timedelta(seconds=3)
    jobs = one_shots(container, start, count=20, step=0.5)
    processes = [start_scheduler(container), start_scheduler(container)]
    try:
        wait_for(lambda: leader_pid(container) is not None, 10)
        wait_for(lambda: len(fires(container)) >= 4, 20)
        paused = leader_pid(container)
        os.kill(paused or 0, signal.SIGSTOP)
        stopped_at = datetime.now(tz=UTC)
        wait_for(lambda: leader_pid(container) not in {None, paused}, 10)
        time.sleep(TTL_MS / 1000)
        os.kill(paused or 0, signal.SIGCONT)
        resumed_at = datetime.now(tz=UTC)
        wait_for(lambda: len(fires(container)) >= len(jobs), 30)
        time.sleep(1)  # give the resumed process every chance to misbehave
    finally:
        stop_all(processes)
    recorded = fires(container)
    assert Counter(e.originator_id for e in recorded) == Counter({j.id: 1 for j in jobs})
    epochs_before = {vars(e)["leader_epoch"] for e in recorded if e.timestamp < stopped_at}
    old_epoch = max(epochs_before)
    late_by_old = [
        e for e in recorded if vars(e)["leader_epoch"] == old_epoch and e.timestamp > resumed_at
    ]
    assert late_by_old == []


def fired_at_least(container: Container, count: int) -> bool:
    return len(fires(container)) >= count


def elected_epochs(logs: list[Path]) -> list[int]:
    """The epoch of every leadership the scheduler processes logged."""
    entries = (json.loads(line) for log in logs for line in log.read_text().splitlines())
    return [e["leader_epoch"] for e in entries if e.get("event") == "leader.elected"]


def test_epochs_only_grow_when_redis_is_flushed_under_running_schedulers(
    container: Container, tmp_path: Path
) -> None:
    """If Redis is flushed twice while two scheduler processes fire, then every
    occurrence fires once, the epochs of the fires only grow in log order, and no two
    leaderships share an epoch."""
    start = datetime.now(tz=UTC) + timedelta(seconds=2)
    jobs = one_shots(container, start, count=24, step=0.25)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    processes = [start_scheduler(container, log) for log in logs]
    client = redis.Redis.from_url(container.settings.redis_url)
    try:
        for count in (6, 14):
            wait_for(functools.partial(fired_at_least, container, count), 20)
            client.flushall()
        wait_for(lambda: len(fires(container)) >= len(jobs), 30)
    finally:
        client.close()
        stop_all(processes)
    recorded = fires(container)
    assert Counter(e.originator_id for e in recorded) == Counter({j.id: 1 for j in jobs})
    epochs = [vars(e)["leader_epoch"] for e in recorded]
    assert epochs == sorted(epochs)
    elected = elected_epochs(logs)
    assert len(elected) >= 3  # the first leader, and one after each flush
    assert len(set(elected)) == len(elected)
    assert set(epochs) <= set(elected)
