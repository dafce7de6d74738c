"""The queue projection on PostgreSQL and Redis: loss, rebuild, verify, a dropped LISTEN."""

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import redis
import structlog

from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.postgres.listener import ChannelListener
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.policies import RetryPolicy
from jobledger.infra.settings import load_settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.queue import projection as queue_projection
from jobledger.projections.queue.backend import QueueMeta, QueueState
from jobledger.projections.queue.projection import verify_queue

NOW = datetime.now(tz=UTC)


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - started


@pytest.fixture
def container(postgres_url: str, redis_server: str) -> Iterator[Container]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=postgres_url,
        redis_url=redis_server,
        redis_prefix=prefix,
        projection_poll_ms="200",
    )
    with bootstrap(settings) as built:
        yield built


def mixed_executions(count: int) -> tuple[list[Execution], dict[str, set[uuid.UUID]]]:
    """``count`` executions spread over ready, delayed, leased, dead and completed."""
    executions: list[Execution] = []
    by_state: dict[str, set[uuid.UUID]] = {
        s: set() for s in ("ready", "delayed", "leased", "dead", "done")
    }
    for index in range(count):
        kind = ("ready", "delayed", "leased", "dead", "done")[index % 5]
        delay = timedelta(hours=1) if kind == "delayed" else timedelta(0)
        execution = Execution.enqueue(
            spec=ExecutionSpec(
                handler="test.echo",
                queue=("default", "reports")[index % 2],
                priority=index % 10,
                retry=RetryPolicy(max_retries=0),
            ),
            ready_at=NOW + delay,
            trigger=Trigger.ADHOC,
        )
        if kind in {"leased", "dead", "done"}:
            lease_id = uuid.uuid4()
            execution.lease(
                worker_id="w", lease_id=lease_id, lease_expires_at=NOW + timedelta(hours=1)
            )
            if kind == "dead":
                execution.fail(lease_id=lease_id, error="boom", at=NOW)
            if kind == "done":
                execution.complete(lease_id=lease_id, duration=timedelta(1), result={})
        executions.append(execution)
        by_state[kind].add(execution.id)
    return executions, by_state


def save_in_batches(ledger: Ledger, executions: list[Execution], batch: int = 500) -> None:
    for start in range(0, len(executions), batch):
        ledger.save(*executions[start : start + batch])


def caught_up(container: Container) -> Callable[[], bool]:
    def check() -> bool:
        meta = container.queue.read_meta()
        head = container.ledger.recorder.max_notification_id() or 0
        return meta is not None and meta.position >= head

    return check


def open_ids(container: Container) -> dict[uuid.UUID, QueueState]:
    return {
        item.execution_id: item.state
        for queue in container.queue.queues()
        for item in container.queue.items(queue)
    }


def projected(container: Container, execution_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: execution_id in open_ids(container)


def test_flushall_while_running_is_repaired_by_itself(container: Container) -> None:
    """If Redis loses everything while the projection runs, then the queue comes back by
    itself within seconds, verify finds no difference, and nothing is lost or revived."""
    executions, by_state = mixed_executions(10_000)
    save_in_batches(container.ledger, executions)
    projector = container.projector()
    projector.start()
    try:
        wait_until(caught_up(container), timeout=60)
        wait_until(lambda: projector.checkpoint.position == projector.queue.position, 60)
        redis.Redis.from_url(container.settings.redis_url).flushall()
        recovered_in = wait_until(caught_up(container), timeout=30)
        assert recovered_in < 10
        assert projector.queue.rebuilds >= 2  # the first build, and the repair
        assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []
        states = open_ids(container)
        assert not by_state["done"] & states.keys()
        for kind in ("ready", "delayed", "leased", "dead"):
            assert by_state[kind] <= states.keys(), kind
        assert {states[i] for i in by_state["dead"]} == {QueueState.DEAD}
        assert {states[i] for i in by_state["leased"]} == {QueueState.LEASED}
        depths = container.queue.depths("default", now=NOW + timedelta(minutes=1))
        assert depths.ready > 0
        assert depths.delayed > 0
    finally:
        projector.stop()


def test_killing_the_listen_connection_does_not_stop_the_projection(container: Container) -> None:
    """If the LISTEN connection is terminated, then new events still reach the queue."""
    projector = container.projector()
    projector.start()
    try:
        listener = projector.listener
        assert isinstance(listener, ChannelListener)
        wait_until(lambda: listener.backend_pid is not None)
        first_pid = listener.backend_pid
        with psycopg.connect(container.settings.database_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
        execution = Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo"), ready_at=NOW, trigger=Trigger.ADHOC
        )
        container.ledger.save(execution)
        wait_until(projected(container, execution.id), timeout=10)
        wait_until(lambda: listener.connections >= 2, timeout=10)
        assert listener.backend_pid != first_pid
    finally:
        projector.stop()


def test_projection_lag_is_short_with_notifications(container: Container) -> None:
    """If an event is saved, then it is leasable well before the polling interval."""
    projector = container.projector()
    projector.start()
    try:
        wait_until(caught_up(container))
        lags = []
        for _ in range(20):
            execution = Execution.enqueue(
                spec=ExecutionSpec(handler="test.echo"), ready_at=NOW, trigger=Trigger.ADHOC
            )
            container.ledger.save(execution)
            lags.append(wait_until(projected(container, execution.id), timeout=5))
        # The poll interval is 200 ms here; LISTEN wakes the follower long before that.
        assert sorted(lags)[len(lags) // 2] < 0.15
    finally:
        projector.stop()


def run_cli(container: Container, *args: str) -> subprocess.CompletedProcess[str]:
    settings = container.settings
    return subprocess.run(  # noqa: S603 (our own entry point, fixed arguments)
        [
            sys.executable,
            "-m",
            "jobledger.cli",
            "--database-url",
            settings.database_url,
            "--redis-url",
            settings.redis_url,
            "--redis-prefix",
            settings.redis_prefix,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_rebuild_and_verify(container: Container) -> None:
    """If the queue is tampered with, then verify lists the difference and exits 1; after
    `queue rebuild --full` it matches again."""
    executions, _ = mixed_executions(200)
    save_in_batches(container.ledger, executions)
    rebuilt = run_cli(container, "queue", "rebuild", "--full")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "open executions" in rebuilt.stdout
    assert "rebuilding queue" in rebuilt.stderr  # the progress bar
    # Asked for, not lost; and no log line glued to the bar's line.
    logged = [line for line in rebuilt.stderr.splitlines() if "queue." in line]
    assert [("queue.rebuild_requested" in x, "queue.rebuilt" in x) for x in logged] == [
        (True, False),
        (False, True),
    ]
    assert all("rebuilding queue" not in line for line in logged)
    assert "requested_by" in logged[1]
    assert "queue.lost" not in rebuilt.stderr
    assert run_cli(container, "queue", "verify").returncode == 0
    victim = next(iter(container.queue.items("default")))
    container.queue.lease(
        "default", lease_ids=[uuid.uuid4()], ttl=timedelta(1), now=NOW + timedelta(hours=2)
    )
    verified = run_cli(container, "queue", "verify")
    assert verified.returncode == 1
    assert "difference" in verified.stdout
    assert run_cli(container, "queue", "rebuild", "--full").returncode == 0
    assert run_cli(container, "queue", "verify").returncode == 0
    assert victim.execution_id in open_ids(container)


def test_the_quiet_step_after_a_page_leaves_the_meta_alone_for_a_while(
    container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If pages keep coming, then the quiet step after each page reads the queue's meta
    at most once per QUIET_CHECK_EVERY (the apply checked the epoch), and a loss is
    still found by the next quiet step that follows a quiet one."""
    follower = container.projector().queue
    follower.step()  # builds the queue; the first quiet step looks
    reads: list[float] = []
    backend = follower.backend
    read_meta = backend.read_meta

    def counted() -> QueueMeta | None:
        reads.append(time.monotonic())
        return read_meta()

    monkeypatch.setattr(backend, "read_meta", counted)
    monkeypatch.setattr(queue_projection, "QUIET_CHECK_EVERY", 600.0)  # a slow machine's
    for _ in range(5):
        executions, _ = mixed_executions(5)
        save_in_batches(container.ledger, executions)
        assert follower.step() is True
        assert follower.step() is False
    assert reads == []
    redis.Redis.from_url(container.settings.redis_url).flushall()
    with structlog.testing.capture_logs() as logs:
        assert follower.step() is True  # a quiet step after a quiet one: it looks
    assert "queue.lost" in [e["event"] for e in logs]
    while follower.step():
        pass
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_follower_waits_for_another_process_rebuild_then_follows_it(
    container: Container,
) -> None:
    """If another process rebuilds the queue while a follower runs, then the follower
    waits while that rebuild is still loading (it would race the load), follows the
    rebuilt queue once it is done, and never reports the queue lost or rebuilds it."""
    executions, _ = mixed_executions(300)
    save_in_batches(container.ledger, executions[:200])
    follower = container.projector().queue
    while follower.step():
        pass
    first_epoch = follower.epoch
    with structlog.testing.capture_logs() as logs:
        # The other process has reset the queue and is loading it (position 0).
        loading = QueueMeta(store_id=container.store_id, epoch="loading", position=0, loading=True)
        container.queue.reset(loading)
        save_in_batches(container.ledger, executions[200:])
        assert follower.step() is False
        assert follower.epoch == first_epoch
        report = container.projector().queue.rebuild(full=True, requested_by="operator")
        assert follower.step() is True
        while follower.step():
            pass
    events = [e["event"] for e in logs]
    assert "queue.rebuild_awaited" in events
    assert "queue.rebuild_followed" in events
    assert "queue.lost" not in events
    assert follower.rebuilds == 1  # its own first build only
    assert follower.epoch not in {first_epoch, "loading"}
    assert follower.position >= report.position
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_projector_started_during_another_process_load_waits_for_it(
    container: Container,
) -> None:
    """If a projector starts while another process's rebuild is still loading the queue,
    then it neither adopts the half-loaded queue nor rebuilds it: it waits, then follows
    the rebuilt queue once the load is done."""
    executions, by_state = mixed_executions(60)
    save_in_batches(container.ledger, executions)
    loading = QueueMeta(store_id=container.store_id, epoch="loading", position=0, loading=True)
    container.queue.reset(loading)
    starter = container.projector().queue
    with structlog.testing.capture_logs() as logs:
        assert starter.step() is False
        assert (starter.epoch, starter.rebuilds) == (None, 0)
        rebuilder = container.projector().queue
        report = rebuilder.rebuild(full=True, requested_by="operator")
        starter.step()
        assert starter.epoch == rebuilder.epoch
        more, _ = mixed_executions(20)
        save_in_batches(container.ledger, more)
        while starter.step():
            pass
    events = [e["event"] for e in logs]
    assert "queue.rebuild_awaited" in events
    assert "queue.lost" not in events
    assert starter.rebuilds == 0
    assert starter.position >= report.position
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_rebuild_that_failed_half_way_is_not_awaited_by_its_own_process(
    container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If this process's rebuild fails after the reset (the store is left loading under
    its epoch), then its next step waits for nobody: it replays the log onto the queue
    and the queue ends equal to the log."""
    executions, by_state = mixed_executions(60)
    save_in_batches(container.ledger, executions)
    projection = container.projector().queue
    backend = projection.backend

    def fails(*_args: object, **_kwargs: object) -> int:
        raise ConnectionError

    monkeypatch.setattr(backend, "load", fails)
    with pytest.raises(ConnectionError):
        projection.rebuild(full=True)
    monkeypatch.undo()
    meta = backend.read_meta()
    assert meta is not None
    assert meta.loading
    with structlog.testing.capture_logs() as logs:
        assert projection.step() is True
        while projection.step():
            pass
    assert "queue.rebuild_awaited" not in [e["event"] for e in logs]
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def _reset_stopped_half_way(container: Container, monkeypatch: pytest.MonkeyPatch) -> str:
    """A rebuild whose reset stopped right after it wrote the new meta (a lost
    connection, a killed process); returns that rebuild's epoch."""
    rebuilder = container.projector().queue

    def unreachable() -> set[str]:
        raise redis.ConnectionError

    with monkeypatch.context() as patched:
        patched.setattr(rebuilder.backend, "queues", unreachable)
        with pytest.raises(redis.ConnectionError):
            rebuilder.rebuild(full=True)
    meta = container.queue.read_meta()
    assert meta is not None
    assert meta.loading
    return meta.epoch


@pytest.mark.parametrize("whose", ["own", "other"])
def test_a_reset_stopped_half_way_is_built_anew(
    container: Container, monkeypatch: pytest.MonkeyPatch, whose: str
) -> None:
    """If a rebuild's reset stops half way (the store reads as loading, never as lost),
    then the follower of the process that began it, or another process's follower once
    it has waited, finds its first page refused, reports the queue lost and builds it
    anew: it neither loops nor waits for ever."""
    executions, by_state = mixed_executions(60)
    save_in_batches(container.ledger, executions)
    follower = container.projector().queue
    while follower.step():
        pass
    monkeypatch.setattr(queue_projection, "LOAD_SILENCE", 0.0)
    if whose == "own":
        follower.epoch = None  # as after its own rebuild failed
        monkeypatch.setattr(follower, "_building", _reset_stopped_half_way(container, monkeypatch))
    else:
        _reset_stopped_half_way(container, monkeypatch)
    rebuilds = follower.rebuilds
    with structlog.testing.capture_logs() as logs:
        for _ in range(10):
            if not follower.step() and follower.rebuilds > rebuilds:
                break
    assert follower.rebuilds == rebuilds + 1
    assert {"event": "queue.lost", "loading": True}.items() <= next(
        e for e in logs if e.get("loading")
    ).items()
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_follower_waits_while_a_load_moves_and_not_once_it_stops(
    container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If another process's rebuild is loading, then a follower waits for as long as the
    load's count of batches moves, and once it has not moved for LOAD_SILENCE (its
    loader died) follows the queue from position 0, which mends it; it never waits the
    longer REBUILD_WAIT meant for loaders that do not count."""
    executions, by_state = mixed_executions(60)
    save_in_batches(container.ledger, executions)
    follower = container.projector().queue
    while follower.step():
        pass
    first_epoch = follower.epoch
    monkeypatch.setattr(queue_projection, "LOAD_SILENCE", 2.0)
    monkeypatch.setattr(queue_projection, "REBUILD_WAIT", 600.0)
    loading = QueueMeta(
        store_id=container.store_id, epoch="loading", position=0, loading=True, load_progress=1
    )
    container.queue.reset(loading)
    started = time.monotonic()
    while time.monotonic() - started < 3:  # longer than the silence, never silent
        container.queue.load_entries([[]], epoch="loading")
        assert follower.step() is False
        time.sleep(0.2)
    assert (follower.epoch, follower.rebuilds) == (first_epoch, 1)
    time.sleep(2.1)  # the loader died: its count stopped
    with structlog.testing.capture_logs() as logs:
        while follower.step():
            pass
    assert follower.epoch == "loading"
    assert "queue.lost" not in [e["event"] for e in logs]
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


@pytest.mark.parametrize("beats", [True, False], ids=["beating", "silent"])
def test_a_load_that_pauses_longer_than_the_silence_is_waited_for_while_it_beats(
    container: Container, monkeypatch: pytest.MonkeyPatch, beats: bool
) -> None:
    """If another process's rebuild takes longer than LOAD_SILENCE between its reset and
    its first batch (a slow read of the checkpoint), then its loader's beats keep a
    follower waiting, and the follower then follows the rebuilt queue; without beats the
    follower takes the loader for dead and follows the queue from position 0."""
    executions, by_state = mixed_executions(40)
    save_in_batches(container.ledger, executions)
    projector = container.projector()
    while projector.queue.step() | projector.checkpoint.step():
        pass
    follower = container.projector().queue
    while follower.step():
        pass
    monkeypatch.setattr(queue_projection, "LOAD_SILENCE", 1.0)
    monkeypatch.setattr(queue_projection, "LOAD_BEAT", 0.1 if beats else 600.0)
    rebuilder = projector.queue
    load_entries = rebuilder.backend.load_entries

    def slow(*args: object, **kwargs: object) -> int:
        time.sleep(2.5)
        return load_entries(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rebuilder.backend, "load_entries", slow)
    rebuild = threading.Thread(target=rebuilder.rebuild)
    with structlog.testing.capture_logs() as logs:
        rebuild.start()
        wait_until(lambda: (meta := container.queue.read_meta()) is not None and meta.loading)
        steps: list[tuple[bool, bool]] = []  # (the step's answer, still loading after it)
        while rebuild.is_alive():
            step = follower.step()
            meta = container.queue.read_meta()
            steps.append((step, meta is not None and meta.loading))
            time.sleep(0.1)
        rebuild.join()
        while follower.step():
            pass
    events = [e["event"] for e in logs]
    assert "queue.rebuild_awaited" in events
    if beats:
        # A step still under the load waited (one as the load ends may rightly follow it).
        assert any(loading for _, loading in steps)
        assert not any(step for step, loading in steps if loading)
        assert follower.epoch == rebuilder.epoch
        assert "queue.rebuild_followed" in events
    else:
        assert any(step for step, _ in steps)  # it followed the half-loaded queue from 0
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_rebuild_before_the_checkpoint_folded_anything_reads_the_log(
    container: Container,
) -> None:
    """If the queue is rebuilt while the checkpoint has folded nothing yet but the log
    holds runs, then the rebuild reads the log (the queue holds the open runs, at the
    log's head), and a follower in another process follows it at its next step instead
    of taking it for a rebuild still loading."""
    executions, by_state = mixed_executions(50)
    save_in_batches(container.ledger, executions)
    follower = container.projector().queue
    while follower.step():
        pass
    assert container.checkpoint.position() == 0  # never stepped
    with structlog.testing.capture_logs() as logs:
        report = container.projector().queue.rebuild(requested_by="operator")
        assert follower.step() is True
    assert (report.source, report.position) == ("log", container.head())
    events = [e["event"] for e in logs]
    assert "queue.rebuild_followed" in events
    assert "queue.rebuild_awaited" not in events
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_rebuild_of_an_empty_log_is_followed_once_events_come(
    container: Container,
) -> None:
    """If another process rebuilt the queue while the log was empty (its queue is done
    loading at position 0) and runs are saved after it, then a follower follows that
    queue at its next step instead of waiting for it as for a load."""
    follower = container.projector().queue
    follower.step()
    first_epoch = follower.epoch
    report = container.projector().queue.rebuild(full=True, requested_by="operator")
    assert report.position == 0
    executions, by_state = mixed_executions(20)
    save_in_batches(container.ledger, executions)
    with structlog.testing.capture_logs() as logs:
        assert follower.step() is True
        while follower.step():
            pass
    events = [e["event"] for e in logs]
    assert "queue.rebuild_followed" in events
    assert "queue.rebuild_awaited" not in events
    assert follower.epoch not in {first_epoch, None}
    assert by_state["ready"] <= open_ids(container).keys()
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_a_queue_ahead_of_a_restored_log_is_rebuilt(container: Container) -> None:
    """If the database is restored from a backup older than what Redis has seen, then
    the next projection start finds the queue ahead of the log and rebuilds it: the
    executions of the lost future are gone from the queue, the restored ones remain."""
    kept, _ = mixed_executions(10)
    save_in_batches(container.ledger, kept)
    backup_head = container.ledger.recorder.max_notification_id() or 0
    lost, _ = mixed_executions(10)
    save_in_batches(container.ledger, lost)
    projection = container.projector().queue
    while projection.step():
        pass
    assert {e.id for e in lost} & set(open_ids(container))
    with psycopg.connect(container.settings.database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM jobledger_events WHERE notification_id > %s", (backup_head,))
    restarted = container.projector().queue
    while restarted.step():
        pass
    assert restarted.rebuilds == 1
    assert not {e.id for e in lost} & set(open_ids(container))
    assert {e.id for e in kept} & set(open_ids(container))
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


@pytest.mark.parametrize("full", [False, True], ids=["checkpoint", "log"])
def test_a_rebuild_restores_leases_for_one_more_ttl(container: Container, full: bool) -> None:
    """If the queue is rebuilt (from the checkpoint or the log) long after a lease was
    granted, then the lease expires no sooner than one of its ttls after the rebuild,
    its worker's heartbeat (same lease id) extends it, and verify finds no difference."""
    ttl = timedelta(seconds=30)
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.delay"), ready_at=NOW, trigger=Trigger.ADHOC
    )
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=datetime.now(UTC) + ttl)
    container.ledger.save(execution)
    projector = container.projector()
    while projector.queue.step() | projector.checkpoint.step():
        pass
    rebuilt_at = datetime.now(UTC) + timedelta(hours=1)
    projector.queue.rebuild(full=full, now=rebuilt_at)
    pair, second = (execution.id, lease_id), timedelta(seconds=1)
    # The ttl is the event's deadline less the event's time: about the 30 s granted.
    assert container.queue.expired("default", now=rebuilt_at + ttl - second, limit=9) == []
    assert container.queue.expired("default", now=rebuilt_at + ttl + second, limit=9) == [pair]
    later = rebuilt_at + 2 * ttl
    assert container.queue.extend("default", execution.id, lease_id, deadline=later)
    assert container.queue.expired("default", now=rebuilt_at + ttl + second, limit=9) == []
    assert verify_queue(container.reader(), container.queue, scratch=MemoryQueue()) == []


def test_each_follower_is_built_with_its_window(
    container: Container,
) -> None:
    """If the projector is built, then the checkpoint's follower lets events gather for
    at least CHECKPOINT_COALESCE after a wake-up (a run leased and completed meanwhile
    costs its row one write); the read models let events gather after a wake-up in
    proportion to their last page, up to the setting's window; the queue's follower
    answers a wake-up at once and paces only busy steps."""
    from jobledger.projections.quarantine import (  # noqa: PLC0415 (here only)
        CHECKPOINT_FOLLOWER,
        QUEUE_FOLLOWER,
        READ_MODELS_FOLLOWER,
    )
    from jobledger.runtime.projector import (  # noqa: PLC0415 (here only)
        CHECKPOINT_COALESCE,
        QUEUE_SPACING,
    )

    batch = container.settings.projection_batch_ms / 1000
    projector = container.projector()
    windows = {follower.name: follower._coalesce for follower in projector.followers}
    by_page = windows.pop(READ_MODELS_FOLLOWER)
    assert windows[CHECKPOINT_FOLLOWER] == max(batch, CHECKPOINT_COALESCE) > batch
    assert windows[QUEUE_FOLLOWER] == 0
    assert callable(by_page)
    assert by_page() == 0  # no page yet: a wake-up is read at once
    spacings = {follower.name: follower._spacing for follower in projector.followers}
    assert spacings == {
        QUEUE_FOLLOWER: QUEUE_SPACING,
        CHECKPOINT_FOLLOWER: 0,
        READ_MODELS_FOLLOWER: 0,
    }
