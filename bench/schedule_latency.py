"""Schedule latency: how late due jobs are enqueued and leased, with the shipped settings.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops the server and drops the database at the end,
also on an error or Ctrl-C.

    python -m bench.schedule_latency [--quick] [--profile] [--tick-ms MS] [--seed N]
        [--admin-url URL]

One-shot jobs fall due at uniformly random instants over the window. In this process
run a scheduler (``SchedulerService`` on the container's scheduler, Redis leadership),
the projector, and one consumer thread that stands in for a worker: it leases from the
queue in a loop and records when it first saw each execution. Per occurrence:

- scheduled -> enqueued: the ``ExecutionEnqueued`` event timestamp (taken when the
  scheduler builds the event, before the write commits) minus ``scheduled_for``; split
  into the wait for the tick that fired it and the time inside that tick;
- scheduled -> started: the consumer's first lease of the execution minus
  ``scheduled_for`` (commit, projection into Redis and the lease loop included).

With ``--profile`` the ticks of the window run under cProfile and the functions with
the most cumulative time are printed (the profiler slows the ticks: use it to see
where the time goes, not for the latency figures).
"""

from __future__ import annotations

import bisect
import cProfile
import itertools
import os
import pstats
import random
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from bench import _support as support
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution
from jobledger.domain.job import Job
from jobledger.domain.schedules import OneShotSchedule
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import Settings, load_settings
from jobledger.runtime.scheduler import SchedulerService

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from jobledger.persistence.ledger import Ledger
    from jobledger.projections.queue.backend import QueueBackend
    from jobledger.runtime.scheduler import Scheduler, TickReport

QUEUE = "default"
SPEC = ExecutionSpec(handler="test.echo", queue=QUEUE)
LEAD = 3.0  # seconds from scheduling the jobs to the start of the window
SAVE_CHUNK = 100  # jobs saved per transaction while setting up
LEASE_BATCH = 10
LEASE_TTL = timedelta(minutes=30)  # longer than the run: no lease expires
LEASE_IDLE = 0.001  # the consumer's pause after an empty lease
GRACE = 10.0  # seconds after the last due time for the last leases
READY_TIMEOUT = 30.0
PROFILE_TOP = 25
TARGET_ENQUEUED_P99_MS = 50.0


@dataclass(frozen=True)
class Sizes:
    jobs: int
    window: float  # seconds over which the jobs fall due


def sizes(*, quick: bool) -> Sizes:
    return Sizes(200, 15.0) if quick else Sizes(1000, 60.0)


@dataclass(frozen=True)
class Row:
    measure: str
    count: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    target: str | None = None
    met: bool | None = None
    note: str = ""


@dataclass(frozen=True)
class Occurrence:
    execution_id: uuid.UUID
    scheduled_for: datetime
    enqueued_at: datetime  # the ExecutionEnqueued event timestamp


@dataclass(frozen=True)
class TickRecord:
    now: datetime  # what the service passed to the tick (read just before it)
    seconds: float
    fired: int


# ---- the parts that run ----------------------------------------------------------------


class Consumer:
    """A worker stand-in: leases in a loop and records when each execution first came."""

    def __init__(self, backend: QueueBackend) -> None:
        self._backend = backend
        self.leased: dict[uuid.UUID, datetime] = {}
        self.errors: list[BaseException] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-consumer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                ids = [uuid.uuid4() for _ in range(LEASE_BATCH)]
                leases = self._backend.lease(
                    QUEUE, lease_ids=ids, ttl=LEASE_TTL, now=datetime.now(UTC)
                )
                seen = datetime.now(UTC)
                for lease in leases:
                    self.leased.setdefault(lease.execution_id, seen)
                if not leases:
                    self._stopping.wait(LEASE_IDLE)
        except BaseException as error:  # noqa: BLE001 (re-raised by the main thread)
            self.errors.append(error)


class TickTimer:
    """Wraps ``Scheduler.tick`` of one scheduler: records each tick that acted, and
    runs the ticks from ``profile_from`` on under ``profiler`` when there is one."""

    def __init__(self, scheduler: Scheduler, profiler: cProfile.Profile | None) -> None:
        self.records: list[TickRecord] = []
        self.profile_from: datetime | None = None
        self._profiler = profiler
        self._tick = scheduler.tick
        scheduler.tick = self.tick  # type: ignore[method-assign]

    def tick(self, now: datetime) -> TickReport:
        profiler = self._profiler
        if profiler is None or self.profile_from is None or now < self.profile_from:
            profiler = None
        begun = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        try:
            report = self._tick(now)
        finally:
            if profiler is not None:
                profiler.disable()
        if report.acted:
            self.records.append(TickRecord(now, time.perf_counter() - begun, report.fired))
        return report


def due_times(count: int, start: datetime, window: float, seed: int) -> list[datetime]:
    chance = random.Random(seed)
    offsets = sorted(chance.uniform(0.0, window) for _ in range(count))
    return [start + timedelta(seconds=offset) for offset in offsets]


def schedule_jobs(ledger: Ledger, times: Sequence[datetime]) -> None:
    """One one-shot job per instant, saved SAVE_CHUNK to a transaction."""
    now = datetime.now(UTC)
    jobs = [
        Job.schedule(
            JobDefinition(name=f"latency {i}", spec=SPEC, schedule=OneShotSchedule(at)),
            at=now,
            by="bench",
            limits=ledger.limits,
        )
        for i, at in enumerate(times)
    ]
    for begin in range(0, len(jobs), SAVE_CHUNK):
        ledger.save_all(*jobs[begin : begin + SAVE_CHUNK])


@dataclass
class Run:
    occurrences: list[Occurrence]
    leased: dict[uuid.UUID, datetime]
    ticks: list[TickRecord]
    window_start: datetime
    window_end: datetime
    jobs: int


def run(container: Container, size: Sizes, seed: int, profiler: cProfile.Profile | None) -> Run:
    scheduler = container.scheduler()
    timer = TickTimer(scheduler, profiler)
    service = SchedulerService(scheduler)
    projector = container.projector()
    consumer = Consumer(container.queue)
    try:
        projector.start()
        service.start()
        consumer.start()
        support.wait_for(scheduler.leadership.is_leader, READY_TIMEOUT, "leadership")
        support.wait_for(
            lambda: projector.queue.epoch is not None, READY_TIMEOUT, "the queue build"
        )
        listener = projector.listener
        if listener is not None:
            support.wait_for(lambda: listener.connections > 0, READY_TIMEOUT, "LISTEN")
        start = datetime.now(UTC) + timedelta(seconds=LEAD)
        times = due_times(size.jobs, start, size.window, seed)
        schedule_jobs(container.ledger, times)
        if datetime.now(UTC) >= times[0]:
            raise RuntimeError(f"scheduling {size.jobs} jobs took longer than {LEAD:g}s")
        timer.profile_from = start
        support.log(f"{size.jobs} jobs due over {size.window:g}s from {start:%H:%M:%S}")
        wait_until_leased(consumer, scheduler, size.jobs, times[-1])
    finally:
        consumer.stop()
        service.stop()
        projector.stop()
    if consumer.errors:
        raise consumer.errors[0]
    return Run(
        occurrences=read_enqueued(container.ledger),
        leased=dict(consumer.leased),
        ticks=list(timer.records),
        window_start=start,
        window_end=start + timedelta(seconds=size.window),
        jobs=size.jobs,
    )


def wait_until_leased(consumer: Consumer, scheduler: Scheduler, jobs: int, last: datetime) -> None:
    deadline = last + timedelta(seconds=GRACE)
    shown = time.monotonic()
    while len(consumer.leased) < jobs and datetime.now(UTC) < deadline and not consumer.errors:
        time.sleep(0.05)
        if time.monotonic() - shown >= 5.0:
            shown = time.monotonic()
            support.log(
                f"  {scheduler.stats.fired}/{jobs} fired, {len(consumer.leased)}/{jobs} leased"
            )
    support.log(f"  {scheduler.stats.fired}/{jobs} fired, {len(consumer.leased)}/{jobs} leased")


def read_enqueued(ledger: Ledger) -> list[Occurrence]:
    notifications = ledger.recorder.select_notifications(
        start=1, limit=1_000_000, topics=[Execution.Enqueued.TOPIC]
    )
    events = [ledger.mapper.to_domain_event(n) for n in notifications]
    return [
        Occurrence(e.originator_id, e.scheduled_for, e.timestamp)
        for e in events
        if isinstance(e, Execution.Enqueued) and e.scheduled_for is not None
    ]


# ---- the figures -----------------------------------------------------------------------


def ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000


def stats_row(measure: str, values_ms: Sequence[float], note: str = "") -> Row:
    ordered = sorted(values_ms)
    if not ordered:
        return Row(measure, 0, None, None, None, note=note)
    return Row(
        measure,
        len(ordered),
        round(support.percentile(ordered, 0.50), 2),
        round(support.percentile(ordered, 0.99), 2),
        round(ordered[-1], 2),
        note=note,
    )


def split_by_tick(result: Run) -> tuple[list[float], list[float]]:
    """Per occurrence: (waiting for the tick that fired it, inside that tick) in ms."""
    nows = [record.now for record in result.ticks]
    waiting: list[float] = []
    inside: list[float] = []
    for occurrence in result.occurrences:
        index = bisect.bisect_right(nows, occurrence.enqueued_at) - 1
        if index < 0:
            continue
        tick_now = nows[index]
        waiting.append(ms(tick_now - occurrence.scheduled_for))
        inside.append(ms(occurrence.enqueued_at - tick_now))
    return waiting, inside


def figures(result: Run) -> list[Row]:
    enqueued = [ms(o.enqueued_at - o.scheduled_for) for o in result.occurrences]
    started = [
        ms(result.leased[o.execution_id] - o.scheduled_for)
        for o in result.occurrences
        if o.execution_id in result.leased
    ]
    never_fired = result.jobs - len(result.occurrences)
    never_leased = len(result.occurrences) - len(started)
    head = stats_row(
        "scheduled -> enqueued",
        enqueued,
        f"{never_fired} never fired" if never_fired else "every job fired",
    )
    p99 = head.p99_ms
    head = Row(
        **{
            **asdict(head),
            "target": f"p99 <= {TARGET_ENQUEUED_P99_MS:g} ms",
            "met": p99 is not None and p99 <= TARGET_ENQUEUED_P99_MS and not never_fired,
        }
    )
    waiting, inside = split_by_tick(result)
    window = [t for t in result.ticks if result.window_start <= t.now <= result.window_end]
    periods = [ms(b.now - a.now) for a, b in itertools.pairwise(window)]
    fired_ticks = [t.seconds * 1000 for t in window if t.fired]
    return [
        head,
        stats_row("  waiting for the tick", waiting, "tick now - scheduled_for"),
        stats_row("  inside the tick", inside, "event timestamp - tick now"),
        stats_row(
            "scheduled -> started",
            started,
            f"{never_leased} never leased" if never_leased else "every execution leased",
        ),
        stats_row("tick duration", [t.seconds * 1000 for t in window], "every tick in the window"),
        stats_row("tick duration, firing", fired_ticks, "ticks that fired a job"),
        stats_row("tick period", periods, "from one tick's now to the next"),
    ]


def profile_top(profiler: cProfile.Profile, count: int) -> list[dict[str, object]]:
    """The functions with the most cumulative time in the profiled ticks."""
    table = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    entries = sorted(table.items(), key=lambda item: item[1][3], reverse=True)[:count]
    return [
        {
            "function": f"{Path(file).name}:{line}({name})",
            "calls": calls,
            "own_ms": round(own * 1000, 1),
            "cumulative_ms": round(cumulative * 1000, 1),
        }
        for (file, line, name), (_, calls, own, cumulative, _) in entries
    ]


# ---- services --------------------------------------------------------------------------


# ---- output ----------------------------------------------------------------------------

COLUMNS = (
    ("measure", "{:<23}"),
    ("count", "{:>5}"),
    ("p50_ms", "{:>8}"),
    ("p99_ms", "{:>8}"),
    ("max_ms", "{:>8}"),
    ("target", "{:<16}"),
    ("met", "{:<3}"),
    ("note", "{}"),
)


def describe(settings: Settings, size: Sizes) -> str:
    return (
        f"{size.jobs} one-shot jobs due over {size.window:g} s; scheduler tick (longest pause) "
        f"{settings.scheduler_tick_ms} ms, writer batch {settings.writer_max_batch} / delay "
        f"{settings.writer_max_delay_ms:g} ms, projection poll {settings.projection_poll_ms:g} ms"
        f" (LISTEN wakes it), lease batch {LEASE_BATCH}\n"
    )


def format_profile(top: Sequence[dict[str, object]]) -> str:
    lines = [f"{'cumulative_ms':>13} {'own_ms':>8} {'calls':>7}  function"]
    lines += [
        f"{entry['cumulative_ms']!s:>13} {entry['own_ms']!s:>8} {entry['calls']!s:>7}  "
        f"{entry['function']}"
        for entry in top
    ]
    return "\n".join(lines)


def write_json(
    rows: Sequence[Row],
    settings: Settings,
    args: argparse.Namespace,
    size: Sizes,
    top: Sequence[dict[str, object]],
    *,
    store: str,
    load_before: list[float],
) -> Path:
    suffix = ("-quick" if args.quick else "") + ("-profile" if args.profile else "")
    suffix += f"-tick{args.tick_ms}" if args.tick_ms is not None else ""
    stem = f"schedule_latency{suffix}"
    document = {
        "benchmark": "schedule_latency",
        "recorded_at": support.recorded_at(),
        "quick": args.quick,
        "profiled": args.profile,
        "seed": args.seed,
        "store": store,
        **support.machine(),
        "load_average_before": load_before,
        "load_average_after": support.load_average(),
        "sizes": asdict(size),
        "scheduler_tick_ms": settings.scheduler_tick_ms,
        "writer_max_batch": settings.writer_max_batch,
        "writer_max_delay_ms": settings.writer_max_delay_ms,
        "projection_poll_ms": settings.projection_poll_ms,
        "lease_batch": LEASE_BATCH,
        "rows": [asdict(row) for row in rows],
        "profile": list(top),
    }
    return support.write_json(stem, document)


# ---- entry point -----------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="200 jobs over 15 s, a smoke test")
    parser.add_argument(
        "--profile", action="store_true", help="run the ticks under cProfile and print the top"
    )
    parser.add_argument(
        "--tick-ms",
        type=int,
        help="override JOBLEDGER_SCHEDULER_TICK_MS, the longest pause between ticks (default 50)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the due times (default 1)")
    return parser.parse_args(argv)


def latency_settings(url: str, redis_url: str, tick_ms: int | None) -> Settings:
    """The shipped defaults (but the tick, if given), on this database and Redis;
    warnings only in the log."""
    return load_settings(
        {},
        test_handlers="true",
        database_url=url,
        redis_url=redis_url,
        redis_prefix="bench-latency",
        log_level="warning",
        scheduler_tick_ms=tick_ms,
    )


def measure(settings: Settings, size: Sizes, seed: int, profiler: cProfile.Profile | None) -> Run:
    migrate(settings, progress=support.log)
    configure_logging(settings)
    with bootstrap(settings) as container:
        return run(container, size, seed, profiler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = sizes(quick=args.quick)
    profiler = cProfile.Profile() if args.profile else None
    try:
        with (
            support.throwaway_postgres(args.admin_url) as url,
            support.private_redis() as redis_url,
        ):
            settings = latency_settings(url, redis_url, args.tick_ms)
            store = support.versions(url, redis_url)
            before = support.load_average()
            support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {before}")
            result = measure(settings, size, args.seed, profiler)
    except KeyboardInterrupt:
        support.log("interrupted; redis-server was stopped and the database dropped")
        return 130
    rows = figures(result)
    print(describe(settings, size))
    print(support.format_table(rows, COLUMNS))
    top = profile_top(profiler, PROFILE_TOP) if profiler is not None else []
    if top:
        print(f"\nprofile of the ticks in the window (top {PROFILE_TOP} by cumulative time)")
        print(format_profile(top))
    path = write_json(rows, settings, args, size, top, store=store, load_before=before)
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
