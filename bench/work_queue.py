"""Work-queue speed: lease+ack throughput, projection lag, and rebuild times on Redis.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off), runs every measurement, then stops the server and
drops the database, also on an error or Ctrl-C.

    python -m bench.work_queue [--quick] [--admin-url URL]

1. lease+ack: N pending entries are applied to an empty queue, then leased in batches
   of 1, 10 or 100 and each lease acked, on Redis and on the in-memory backend.
2. projection lag: the projector runs while producer threads save 500 new executions
   per second on one fixed schedule (one execution, so one event, per save) and a
   consumer thread leases (batch 100); lag is the time from ``ledger.save`` returning
   to the first lease that returns the execution.
3. rebuild from the checkpoint: ``jobledger_open_executions`` is filled by COPY, then
   ``QueueProjection.rebuild()`` reads it into an empty Redis prefix.
4. full replay: execution events are loaded into the log by COPY, then
   ``QueueProjection.rebuild(full=True)`` folds the whole log into an empty Redis prefix.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import psycopg
import redis
from psycopg import sql

from bench import _support as support
from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.redis.queue import RedisQueue
from jobledger.adapters.sql.checkpoint import COLUMNS as CHECKPOINT_COLUMNS
from jobledger.adapters.sql.checkpoint import stored_row
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.policies import RetryPolicy
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.backend import (
    QueueChange,
    QueueItem,
    QueueMeta,
    QueueState,
    WorkSpec,
    encode_spec,
)
from jobledger.projections.queue.checkpoint import CHECKPOINT
from jobledger.projections.queue.fold import EXECUTION_TOPICS
from jobledger.projections.queue.projection import QueueProjection
from jobledger.projections.times import from_ms, to_ms

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Iterator, Sequence
    from pathlib import Path

    from jobledger.persistence.ledger import Ledger
    from jobledger.projections.queue.backend import QueueBackend

QUEUES = ("default", "reports")
LEASE_QUEUE = "default"
LEASE_TTL = timedelta(minutes=5)
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)  # a lease "now" at which every entry is due
LEASE_BATCHES = (1, 10, 100)
LAG_RATE = 500  # events per second
# Threads saving on one shared schedule: a save waits ~2 ms for its commit (the recorder
# locks the events table), so one thread cannot offer 500 saves a second.
LAG_PRODUCERS = 4
LAG_LEASE_BATCH = 100
LAG_GRACE = 5.0  # seconds the consumer may take after the last save
READY_TIMEOUT = 30.0
COPY_PROGRESS_EVERY = 50_000

TARGET_LAG_P99_MS = 50.0
TARGET_REBUILD_S_PER_MILLION = 10.0
TARGET_REPLAY_EVENTS_PER_S = 50_000.0

# Executions of the replay log, per 10: (history, how many). 26 events per 10 executions.
REPLAY_MIX = (
    ("pending", 2),  # enqueued
    ("leased", 1),  # enqueued, leased
    ("completed", 3),  # enqueued, leased, completed
    ("retried", 1),  # enqueued, leased, retried, leased, completed
    ("deferred", 1),  # enqueued, leased, deferred
    ("dead", 1),  # enqueued, leased, dead-lettered
    ("cancelled", 1),  # enqueued, cancelled
)
TEMPLATES_PER_KIND = 64
REPLAY_WINDOW = 1000  # executions whose histories are interleaved in the log
# Checkpoint rows, per 100: pending (10 of them delayed), leased, dead.
CHECKPOINT_MIX = (("pending", 90), ("leased", 8), ("dead", 2))


@dataclass(frozen=True)
class Sizes:
    prefill: int  # pending entries per lease+ack row (also its upper bound)
    lease_seconds: float  # time cap per lease+ack row
    lag_seconds: float
    checkpoint_counts: tuple[int, ...]
    replay_events: int


def sizes(*, quick: bool) -> Sizes:
    if quick:
        return Sizes(5_000, 1.0, 2.0, (10_000, 50_000), 50_000)
    return Sizes(50_000, 5.0, 10.0, (100_000, 1_000_000), 1_000_000)


@dataclass(frozen=True)
class Row:
    measure: str
    backend: str
    case: str
    count: int  # items leased and acked, events measured, open executions, events replayed
    seconds: float
    per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""


def job_id(index: int) -> uuid.UUID | None:
    """Three in four specs belong to a job; the rest are ad-hoc runs."""
    return None if index % 4 == 3 else uuid.UUID(int=index + 1)


def work_spec(index: int) -> bytes:
    """A realistic encoded spec; a few payload shapes so entries differ in size."""
    return encode_spec(
        WorkSpec(
            job_id=job_id(index),
            handler=("reports.render", "mail.send", "http.webhook")[index % 3],
            payload={"account": 1000 + index, "format": "pdf", "tags": ["nightly"] * (index % 4)},
            timeout=timedelta(minutes=5),
            max_attempts=4,
        )
    )


# ---- 1. lease+ack throughput -----------------------------------------------------------


def pending_changes(count: int, now: datetime) -> list[QueueChange]:
    """``count`` due entries in one queue, over every priority, oldest first."""
    specs = [work_spec(i) for i in range(8)]
    changes = []
    for index in range(count):
        execution_id = uuid.uuid4()
        item = QueueItem(
            execution_id=execution_id,
            queue=LEASE_QUEUE,
            priority=index % 10,
            version=1,
            state=QueueState.PENDING,
            at=now - timedelta(milliseconds=count - index),
            attempt=1,
            spec=specs[index % len(specs)],
        )
        changes.append(
            QueueChange(execution_id=execution_id, queue=LEASE_QUEUE, version=1, item=item)
        )
    return changes


def prefill(backend: QueueBackend, count: int, label: str) -> None:
    epoch = uuid.uuid4().hex
    backend.reset(QueueMeta(store_id="bench", epoch=epoch, position=0))
    progress = support.Progress(f"{label}: prefill", count)
    done = 0
    changes = pending_changes(count, datetime.now(UTC))
    for start in range(0, count, 5_000):
        chunk = changes[start : start + 5_000]
        backend.apply(chunk, epoch=epoch)
        done += len(chunk)
        progress(done)


def lease_and_ack(
    backend: QueueBackend, batch: int, count: int, seconds: float
) -> tuple[int, float]:
    """Lease ``batch`` at a time and ack each lease, until empty or the time cap."""
    lease_ids = [uuid.uuid4() for _ in range(count + batch)]
    now = datetime.now(UTC)
    acked = 0
    begun = time.perf_counter()
    deadline = begun + seconds
    while acked < count and time.perf_counter() < deadline:
        ids = lease_ids[acked : acked + batch]
        leases = backend.lease(LEASE_QUEUE, lease_ids=ids, ttl=LEASE_TTL, now=now)
        if not leases:
            break
        for lease in leases:
            if not backend.ack(LEASE_QUEUE, lease.execution_id, lease.lease_id):
                raise RuntimeError(f"ack of {lease.execution_id} was refused")
        acked += len(leases)
    return acked, time.perf_counter() - begun


def measure_lease(backend: QueueBackend, name: str, batch: int, size: Sizes) -> Row:
    label = f"lease+ack {name} batch={batch}"
    prefill(backend, size.prefill, label)
    acked, seconds = lease_and_ack(backend, batch, size.prefill, size.lease_seconds)
    support.log(f"{label}: {acked:,} items in {seconds:.2f}s = {acked / seconds:,.0f}/s")
    return Row(
        "lease+ack", name, f"batch={batch}", acked, round(seconds, 3), support.rate(acked, seconds)
    )


def lease_rows(client: redis.Redis, size: Sizes) -> list[Row]:
    rows = []
    for name in ("redis", "memory"):
        for batch in LEASE_BATCHES:
            backend: QueueBackend = (
                RedisQueue(client, prefix="bench-lease") if name == "redis" else MemoryQueue()
            )
            rows.append(measure_lease(backend, name, batch, size))
    client.flushall()
    return rows


# ---- 2. projection lag -----------------------------------------------------------------


@dataclass
class LagRun:
    committed: dict[uuid.UUID, float]  # execution id -> perf_counter when save returned
    leased: dict[uuid.UUID, float]  # execution id -> perf_counter of its first lease
    expected: int
    stop: threading.Event
    errors: list[BaseException]
    begun: float = 0.0  # perf_counter at slot 0 of the save schedule

    @property
    def produce_seconds(self) -> float:
        """From the first slot to the last save that returned."""
        return max(self.committed.values(), default=self.begun) - self.begun


def lag_aggregates(count: int) -> list[Execution]:
    now = datetime.now(UTC)
    return [
        Execution.enqueue(
            spec=ExecutionSpec(handler="test.echo", queue=LEASE_QUEUE, priority=index % 10),
            ready_at=now,
            trigger=Trigger.ADHOC,
        )
        for index in range(count)
    ]


def produce(
    ledger: Ledger, aggregates: Sequence[Execution], run: LagRun, first: int, step: int
) -> None:
    """Save every ``step``-th aggregate from ``first``, each at its slot of the shared
    schedule (LAG_RATE from ``run.begun``, no drift); one event per save, so a lag is
    one event's."""
    try:
        for index in range(first, len(aggregates), step):
            wait = run.begun + index / LAG_RATE - time.perf_counter()
            if wait > 0 and run.stop.wait(wait):
                return
            ledger.save(aggregates[index])
            run.committed[aggregates[index].id] = time.perf_counter()
    except BaseException as error:  # noqa: BLE001 (re-raised by the main thread)
        run.errors.append(error)


def consume(backend: QueueBackend, run: LagRun) -> None:
    """Lease as fast as entries appear; delays do not matter (now is far in the future)."""
    try:
        while not run.stop.is_set() and len(run.leased) < run.expected:
            ids = [uuid.uuid4() for _ in range(LAG_LEASE_BATCH)]
            leases = backend.lease(LEASE_QUEUE, lease_ids=ids, ttl=LEASE_TTL, now=FAR_FUTURE)
            seen = time.perf_counter()
            for lease in leases:
                run.leased.setdefault(lease.execution_id, seen)
            if not leases:
                time.sleep(0.0005)
    except BaseException as error:  # noqa: BLE001 (re-raised by the main thread)
        run.errors.append(error)


def run_lag(container: Container, count: int) -> LagRun:
    aggregates = lag_aggregates(count)
    run = LagRun({}, {}, count, threading.Event(), [])
    consumer = threading.Thread(target=consume, args=(container.queue, run), daemon=True)
    producers = [
        threading.Thread(
            target=produce, args=(container.ledger, aggregates, run, k, LAG_PRODUCERS), daemon=True
        )
        for k in range(LAG_PRODUCERS)
    ]
    try:
        consumer.start()
        run.begun = time.perf_counter()
        for thread in producers:
            thread.start()
        progress = support.Progress("projection lag: saved", count)
        while alive := [thread for thread in producers if thread.is_alive()]:
            alive[0].join(1.0)
            progress(len(run.committed))
        deadline = time.monotonic() + LAG_GRACE
        while consumer.is_alive() and time.monotonic() < deadline:
            consumer.join(0.1)
    finally:
        run.stop.set()
        for thread in [consumer, *producers]:
            thread.join(10)
    if run.errors:
        raise run.errors[0]
    return run


def measure_lag(container: Container, size: Sizes) -> Row:
    count = round(LAG_RATE * size.lag_seconds)
    projector = container.projector()
    projector.start()
    try:
        listener = projector.listener
        support.wait_for(
            lambda: projector.queue.epoch is not None, READY_TIMEOUT, "the queue build"
        )
        if listener is not None:
            support.wait_for(lambda: listener.connections > 0, READY_TIMEOUT, "LISTEN")
        support.log(
            f"projection lag: {count:,} saves at {LAG_RATE}/s ({size.lag_seconds:g}s),"
            f" {LAG_PRODUCERS} producer threads"
        )
        run = run_lag(container, count)
    finally:
        projector.stop()
    lags = sorted(run.leased[i] - t for i, t in run.committed.items() if i in run.leased)
    missing = len(run.committed) - len(lags)
    saved_per_s = support.rate(len(run.committed), run.produce_seconds)
    p99 = round(support.percentile(lags, 0.99) * 1000, 2)
    support.log(
        f"projection lag: p99 {p99} ms over {len(lags):,} executions, {missing} never leased"
    )
    notes = [f"{missing} never leased"] if missing else []
    if saved_per_s < LAG_RATE * 0.95:
        notes.append(f"saves reached only {saved_per_s:.0f}/s")
        support.log(
            f"projection lag: the producers fell behind: {saved_per_s:.0f} saves/s, not {LAG_RATE}"
        )
    return Row(
        "projection lag",
        "redis",
        f"{LAG_RATE} events/s",
        len(lags),
        round(run.produce_seconds, 3),
        saved_per_s,
        round(support.percentile(lags, 0.50) * 1000, 2),
        p99,
        round(lags[-1] * 1000, 2) if lags else None,
        f"p99 <= {TARGET_LAG_P99_MS:g} ms at {LAG_RATE}/s",
        p99 <= TARGET_LAG_P99_MS and bool(lags) and not notes,
        "; ".join(notes) or "every save leased",
    )


# ---- 3. rebuild from the checkpoint ----------------------------------------------------


def checkpoint_rows(count: int) -> Iterator[tuple[object, ...]]:
    """Rows as ``SqlCheckpoint`` writes them (``stored_row``), over both queues and every
    priority."""
    now_ms = to_ms(datetime.now(UTC))
    specs = [work_spec(i) for i in range(16)]
    states = [state for state, share in CHECKPOINT_MIX for _ in range(share)]
    for index in range(count):
        state = QueueState(states[index % len(states)])
        lease_id = None
        if state is QueueState.PENDING:
            # One in ten is delayed; the rest became due over the last hour.
            at_ms = now_ms + 600_000 if index % 10 == 9 else now_ms - index % 3_600_000
            version, attempt = 1, 1
        elif state is QueueState.LEASED:
            at_ms, version, attempt, lease_id = now_ms + 300_000, 2, 1, uuid.uuid4()
        else:
            at_ms, version, attempt = now_ms - 60_000, 9, 4
        item = QueueItem(
            execution_id=uuid.uuid4(),
            queue=QUEUES[index % 2],
            priority=index % 10,
            version=version,
            state=state,
            at=from_ms(at_ms),
            attempt=attempt,
            lease_id=lease_id,
            spec=specs[index % len(specs)],
        )
        yield stored_row(item)


def copy_rows(
    cursor: psycopg.Cursor[tuple[object, ...]],
    statement: sql.SQL | sql.Composed,
    rows: Iterable[Sequence[object]],
    progress: support.Progress,
) -> int:
    written = 0
    with cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)
            written += 1
            if written % COPY_PROGRESS_EVERY == 0:
                progress(written)
    progress(written)
    return written


def fill_checkpoint(url: str, count: int, position: int) -> None:
    statement = sql.SQL("COPY jobledger_open_executions ({}) FROM STDIN").format(
        sql.SQL(CHECKPOINT_COLUMNS)
    )
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        cursor.execute("TRUNCATE jobledger_open_executions")
        copy_rows(
            cursor, statement, checkpoint_rows(count), support.Progress("checkpoint: COPY", count)
        )
        cursor.execute(
            "INSERT INTO jobledger_positions (name, position) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
            (CHECKPOINT, position),
        )
        cursor.execute("ANALYZE jobledger_open_executions")


def open_entries(backend: RedisQueue) -> int:
    total = 0
    for queue in backend.queues():
        depths = backend.depths(queue, now=datetime.now(UTC))
        total += depths.ready + depths.delayed + depths.leased + depths.dead
    return total


def measure_checkpoint(container: Container, client: redis.Redis, url: str, count: int) -> Row:
    head = container.ledger.recorder.max_notification_id() or 0
    fill_checkpoint(url, count, head)
    backend = RedisQueue(client, prefix="bench-checkpoint")
    projection = QueueProjection(
        container.ledger, backend, store_id=container.store_id, checkpoint=container.checkpoint
    )
    label = f"rebuild checkpoint {count:,}"
    begun = time.perf_counter()
    report = projection.rebuild(progress=support.Progress(label, count))
    seconds = time.perf_counter() - begun
    found = open_entries(backend)
    if report.items != count or found != count or report.position != head:
        raise RuntimeError(
            f"{label}: {count:,} rows, rebuild read {report.items:,}, Redis holds {found:,}"
            f" (position {report.position}, head {head})"
        )
    support.log(f"{label}: {seconds:.2f}s = {count / seconds:,.0f} open executions/s")
    client.flushall()
    return Row(
        "rebuild checkpoint",
        "redis",
        f"{count:,} open",
        count,
        round(seconds, 3),
        support.rate(count, seconds),
        target=f"<= {TARGET_REBUILD_S_PER_MILLION:g} s per 1M",
        met=seconds * 1_000_000 / count <= TARGET_REBUILD_S_PER_MILLION,
        note="Redis entries = rows",
    )


# ---- 4. full replay --------------------------------------------------------------------

# (originator_version, topic, state) of one execution's history.
History = list[tuple[int, str, bytes]]


def template_history(ledger: Ledger, kind: str, index: int, now: datetime) -> History:
    """A real execution's stored events; the replay reuses them under new ids."""
    spec = ExecutionSpec(
        handler=("reports.render", "mail.send", "http.webhook")[index % 3],
        payload={"account": 1000 + index, "format": "pdf", "tags": ["nightly"] * (index % 4)},
        queue=QUEUES[index % 2],
        priority=index % 10,
        retry=RetryPolicy(max_retries=0 if kind == "dead" else 3),
    )
    job = job_id(index)
    trigger = Trigger.ADHOC if job is None else Trigger.MANUAL
    execution = Execution.enqueue(spec=spec, ready_at=now, trigger=trigger, job_id=job)
    if kind not in {"pending", "cancelled"}:
        lease_id = uuid.uuid4()
        execution.lease(worker_id="w-1", lease_id=lease_id, lease_expires_at=now + LEASE_TTL)
        if kind == "retried":
            execution.fail(lease_id=lease_id, error="upstream timed out", at=now, rand=0.5)
            lease_id = uuid.uuid4()
            execution.lease(worker_id="w-2", lease_id=lease_id, lease_expires_at=now + LEASE_TTL)
        if kind in {"completed", "retried"}:
            execution.complete(lease_id=lease_id, duration=timedelta(seconds=1.5), result={})
        elif kind == "deferred":
            execution.defer(lease_id=lease_id, reason="circuit open", ready_at=now)
        elif kind == "dead":
            execution.fail(lease_id=lease_id, error="bad payload", at=now)
    elif kind == "cancelled":
        execution.cancel(by="operator", reason="not needed")
    stored = [ledger.mapper.to_stored_event(e) for e in execution.collect_events()]
    return [(e.originator_version, e.topic, e.state) for e in stored]


def replay_plan(ledger: Ledger) -> list[History]:
    """One history per execution slot of REPLAY_MIX, cycled by the loader."""
    now = datetime.now(UTC)
    templates = {
        kind: [template_history(ledger, kind, i, now) for i in range(TEMPLATES_PER_KIND)]
        for kind, _ in REPLAY_MIX
    }
    slots = [kind for kind, share in REPLAY_MIX for _ in range(share)]
    used = dict.fromkeys(templates, 0)
    plan = []
    for index in range(TEMPLATES_PER_KIND * len(slots)):
        kind = slots[index % len(slots)]
        plan.append(templates[kind][used[kind] % TEMPLATES_PER_KIND])
        used[kind] += 1
    return plan


def replay_events(plan: Sequence[History], total: int) -> Iterator[tuple[object, ...]]:
    """``total`` events: a window of executions at a time, their histories interleaved
    (every first event, then every second...), so histories span log pages."""
    emitted = 0
    for start in itertools.count(0, REPLAY_WINDOW):
        window = [(uuid.uuid4(), plan[(start + i) % len(plan)]) for i in range(REPLAY_WINDOW)]
        for stage in range(max(len(history) for _, history in window)):
            for execution_id, history in window:
                if stage < len(history):
                    version, topic, state = history[stage]
                    yield execution_id, version, topic, state
                    emitted += 1
                    if emitted == total:
                        return


def load_log(container: Container, url: str, total: int) -> None:
    plan = replay_plan(container.ledger)
    statement = sql.SQL(
        "COPY jobledger_events (originator_id, originator_version, topic, state) FROM STDIN"
    )
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        copy_rows(
            cursor, statement, replay_events(plan, total), support.Progress("log: COPY", total)
        )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE jobledger_events")


def log_counts(url: str) -> tuple[int, int]:
    """(execution events, open executions) as the log says, counted in SQL."""
    topics = sorted(EXECUTION_TOPICS)
    closed = [t for t in topics if t.endswith(("Completed", "Cancelled"))]
    enqueued = [t for t in topics if t.endswith("Enqueued")]
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE topic = ANY(%s))"
            " - count(*) FILTER (WHERE topic = ANY(%s))"
            " FROM jobledger_events WHERE topic = ANY(%s)",
            (enqueued, closed, topics),
        ).fetchone()
    if row is None:
        return 0, 0
    return int(row[0]), int(row[1])


def measure_replay(container: Container, client: redis.Redis, url: str, total: int) -> Row:
    load_log(container, url, total)
    events, open_count = log_counts(url)
    backend = RedisQueue(client, prefix="bench-replay")
    projection = QueueProjection(container.ledger, backend, store_id=container.store_id)
    label = f"full replay {events:,} events"
    head = container.ledger.recorder.max_notification_id() or 0
    begun = time.perf_counter()
    report = projection.rebuild(full=True, progress=support.Progress(label, head))
    seconds = time.perf_counter() - begun
    if report.events != events or report.items != open_count:
        raise RuntimeError(
            f"{label}: replayed {report.events:,} events into {report.items:,} entries;"
            f" the log has {events:,} events and {open_count:,} open executions"
        )
    support.log(f"{label}: {seconds:.2f}s = {events / seconds:,.0f} events/s")
    client.flushall()
    return Row(
        "full replay",
        "redis",
        f"{events:,} events",
        events,
        round(seconds, 3),
        support.rate(events, seconds),
        target=f">= {TARGET_REPLAY_EVENTS_PER_S:,.0f} events/s",
        met=events / seconds >= TARGET_REPLAY_EVENTS_PER_S,
        note=f"{open_count:,} open = log",
    )


# ---- services --------------------------------------------------------------------------


# ---- the run ---------------------------------------------------------------------------


def run_all(url: str, redis_url: str, size: Sizes) -> tuple[list[Row], str]:
    migrate(load_settings({}, test_handlers="true", database_url=url), progress=support.log)
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=url,
        redis_url=redis_url,
        redis_prefix="bench-lag",
        log_level="warning",
    )
    configure_logging(settings)
    client = redis.Redis.from_url(redis_url)
    try:
        store = support.versions(url, redis_url)
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {load}")
        rows = lease_rows(client, size)
        with bootstrap(settings) as container:
            rows.append(measure_lag(container, size))
            client.flushall()
            rows += [measure_checkpoint(container, client, url, n) for n in size.checkpoint_counts]
            rows.append(measure_replay(container, client, url, size.replay_events))
    finally:
        client.close()
    return rows, store


# ---- output ----------------------------------------------------------------------------

COLUMNS = (
    ("measure", "{:<18}"),
    ("backend", "{:<7}"),
    ("case", "{:<18}"),
    ("count", "{:>9}"),
    ("seconds", "{:>7}"),
    ("per_s", "{:>10}"),
    ("p50_ms", "{:>7}"),
    ("p99_ms", "{:>7}"),
    ("max_ms", "{:>7}"),
    ("target", "{:<24}"),
    ("met", "{:<3}"),
    ("note", "{}"),
)


def show(value: object) -> str:
    """As ``support.show``, but large floats without decimals and ints with separators."""
    if isinstance(value, float) and value >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return support.show(value)


def write_json(rows: Sequence[Row], size: Sizes, *, quick: bool, store: str) -> Path:
    stem = f"queue{'-quick' if quick else ''}"
    document = {
        "benchmark": "queue",
        "recorded_at": support.recorded_at(),
        "store": store,
        "quick": quick,
        **support.machine(),
        "load_average_after": support.load_average(),
        "sizes": asdict(size),
        "lag_rate": LAG_RATE,
        "lag_producers": LAG_PRODUCERS,
        "log_load": "COPY into jobledger_events (stored events of template executions)",
        "rows": [asdict(row) for row in rows],
    }
    return support.write_json(stem, document)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = sizes(quick=args.quick)
    try:
        with (
            support.throwaway_postgres(args.admin_url) as url,
            support.private_redis() as redis_url,
        ):
            rows, store = run_all(url, redis_url, size)
    except KeyboardInterrupt:
        support.log("interrupted; redis-server was stopped and the database dropped")
        return 130
    print(support.format_table(rows, COLUMNS, show))
    path = write_json(rows, size, quick=args.quick, store=store)
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
