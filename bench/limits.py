"""Lease throughput with limits on and off: what a limit check costs where runs lease.

Starts a private redis-server on a free loopback port (persistence off), measures, and
stops it, also on an error or Ctrl-C. No database: the queue alone is measured.

    python -m bench.limits [--quick] [--batch N]

Each case applies N pending entries (20,000; 5,000 with ``--quick``) to an empty queue,
then one thread leases ``--batch`` at a time (100) and acks every lease (a round's
acks in one call, as a worker sends them), until the
queue is empty or the time cap (5 s; 1 s with ``--quick``) passes, on the Redis and
the memory backend:

- ``off``: no limits (the baseline);
- ``concurrency, room``: each entry has one of 1,000 concurrency keys with max 1,000,
  so every lease checks and counts a key but nothing waits;
- ``rate, room``: one rate key allowing every lease (10,000,000 per 10 s);
- ``both, room``: both of the above on every entry;
- ``concurrency 2 x 50 keys``: 50 keys allowing 2 at once, while a lease is acked
  only after the next round: most due entries wait, and every ack wakes its key.

The ratio column compares each case with ``off`` on the same backend in the same run.
Checks: every entry is leased and acked exactly once, and in the last case no key
ever holds more than 2 leases.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import redis

from bench import _support as support
from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.redis.queue import RedisQueue
from jobledger.projections.queue.backend import (
    EntryLimits,
    Lease,
    QueueChange,
    QueueItem,
    QueueMeta,
    QueueState,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from jobledger.projections.queue.backend import QueueBackend

Q = "bench"
TTL = timedelta(minutes=5)
MANY_KEYS = 1_000
HELD_KEYS = 50
HELD_MAX = 2


@dataclass(frozen=True)
class Row:
    backend: str
    case: str
    leased: int
    seconds: float
    per_s: float
    us_per_lease: float
    ratio: float | None = None
    waited: int = 0
    note: str = ""


def no_limits(_index: int) -> EntryLimits | None:
    return None


def concurrency_room(index: int) -> EntryLimits:
    return EntryLimits(concurrency_key=f"k{index % MANY_KEYS}", concurrency_max=MANY_KEYS)


def rate_room(_index: int) -> EntryLimits:
    return EntryLimits(rate_key="api", rate_limit=10_000_000, rate_per_ms=10_000)


def both_room(index: int) -> EntryLimits:
    return EntryLimits(
        concurrency_key=f"k{index % MANY_KEYS}",
        concurrency_max=MANY_KEYS,
        rate_key="api",
        rate_limit=10_000_000,
        rate_per_ms=10_000,
    )


def held(index: int) -> EntryLimits:
    return EntryLimits(concurrency_key=f"h{index % HELD_KEYS}", concurrency_max=HELD_MAX)


CASES: tuple[tuple[str, Callable[[int], EntryLimits | None], bool], ...] = (
    ("off", no_limits, False),
    ("concurrency, room", concurrency_room, False),
    ("rate, room", rate_room, False),
    ("both, room", both_room, False),
    (f"concurrency {HELD_MAX} x {HELD_KEYS} keys", held, True),
)


def prefill(backend: QueueBackend, count: int, limits: Callable[[int], EntryLimits | None]) -> str:
    epoch = uuid.uuid4().hex
    backend.reset(QueueMeta(store_id="bench", epoch=epoch, position=0))
    now = datetime.now(UTC)
    changes = []
    for index in range(count):
        execution_id = uuid.uuid4()
        item = QueueItem(
            execution_id=execution_id,
            queue=Q,
            priority=index % 10,
            version=1,
            state=QueueState.PENDING,
            at=now - timedelta(milliseconds=count - index),
            attempt=1,
            spec=b"x" * 120,
            limits=limits(index),
        )
        changes.append(QueueChange.put(item))
    for start in range(0, count, 5_000):
        backend.apply(changes[start : start + 5_000], epoch=epoch)
    return epoch


@dataclass
class Drain:
    """Lease ``batch`` at a time and ack; ``late_acks`` acks a round's leases only after
    the next lease call (so limits fill up and entries wait)."""

    backend: QueueBackend
    batch: int
    late_acks: bool
    leased: int = 0
    waited: int = 0
    most_held: int = 0

    def run(self, count: int, seconds: float, progress: support.Progress) -> float:
        begun = time.perf_counter()
        deadline = begun + seconds
        unacked: list[Lease] = []
        while self.leased < count and time.perf_counter() < deadline:
            ids = [uuid.uuid4() for _ in range(self.batch)]
            taken = self.backend.lease_round(Q, lease_ids=ids, ttl=TTL, now=datetime.now(UTC))
            self.waited += len(taken.throttled)
            if not (taken.leases or taken.throttled or unacked):
                break  # nothing leased, set aside or held: the queue is empty
            self.leased += len(taken.leases)
            self._ack(unacked)
            unacked = list(taken.leases)
            if not self.late_acks:
                self._ack(unacked)
                unacked = []
            else:
                self._check_held(unacked)
            progress(self.leased)
        self._ack(unacked)
        return time.perf_counter() - begun

    def _ack(self, leases: list[Lease]) -> None:
        # A round's acks in one call, as a worker sends them.
        if self.backend.ack_many(leases) != len(leases):
            raise RuntimeError("an ack was refused: a lease was lost")

    def _check_held(self, leases: list[Lease]) -> None:
        """Leases held at once (this round's, before their acks) per key."""
        uses = self.backend.limit_usage(Q, now=datetime.now(UTC))
        most = max((use.in_use for use in uses), default=0)
        self.most_held = max(self.most_held, most)
        if most > HELD_MAX:
            raise RuntimeError(f"a key held {most} leases, over its max of {HELD_MAX}")
        del leases


def measure(
    backend: QueueBackend,
    name: str,
    case: tuple[str, Callable[[int], EntryLimits | None], bool],
    args: Options,
) -> Row:
    label, limits, late = case
    prefill(backend, args.count, limits)
    drain = Drain(backend, args.batch, late)
    seconds = drain.run(args.count, args.seconds, support.Progress(f"{name} {label}", args.count))
    per_s = support.rate(drain.leased, seconds)
    support.log(f"{name} {label}: {drain.leased:,} leases in {seconds:.2f}s = {per_s:,.0f}/s")
    note = f"most held per key {drain.most_held}" if late else ""
    return Row(
        backend=name,
        case=label,
        leased=drain.leased,
        seconds=round(seconds, 3),
        per_s=per_s,
        us_per_lease=round(1e6 * seconds / max(drain.leased, 1), 1),
        waited=drain.waited,
        note=note,
    )


@dataclass(frozen=True)
class Options:
    count: int
    seconds: float
    batch: int


def with_ratios(rows: list[Row]) -> list[Row]:
    baseline = {row.backend: row.per_s for row in rows if row.case == "off"}
    return [
        Row(**{**row.__dict__, "ratio": round(row.per_s / baseline[row.backend], 3)})
        for row in rows
    ]


def run_all(redis_url: str, args: Options) -> list[Row]:
    client = redis.Redis.from_url(redis_url)
    rows = []
    try:
        for name in ("redis", "memory"):
            for case in CASES:
                backend: QueueBackend = (
                    RedisQueue(client, prefix="bench-limits") if name == "redis" else MemoryQueue()
                )
                rows.append(measure(backend, name, case, args))
                client.flushall()
    finally:
        client.close()
    return with_ratios(rows)


COLUMNS = (
    ("backend", "{:<8}"),
    ("case", "{:<26}"),
    ("leased", "{:>8}"),
    ("seconds", "{:>8}"),
    ("per_s", "{:>10}"),
    ("us_per_lease", "{:>12}"),
    ("ratio", "{:>6}"),
    ("waited", "{:>7}"),
    ("note", "{}"),
)


def main() -> None:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="5,000 entries, 1 s per case")
    parser.add_argument("--batch", type=int, default=100, help="lease ids per call (100)")
    parsed = parser.parse_args()
    args = Options(
        count=5_000 if parsed.quick else 20_000,
        seconds=1.0 if parsed.quick else 5.0,
        batch=parsed.batch,
    )
    began = time.perf_counter()
    load_before = support.load_average()
    with support.private_redis() as url:
        rows = run_all(url, args)
    print(support.format_table(rows, COLUMNS, show=support.show))
    stem = (
        "limits"
        + ("-quick" if parsed.quick else "")
        + ("" if args.batch == 100 else f"-b{args.batch}")
    )
    path = support.write_json(
        stem,
        {
            "recorded_at": support.recorded_at(),
            "machine": support.machine(),
            "load_average": {"before": load_before, "after": support.load_average()},
            "options": args.__dict__,
            "seconds": round(time.perf_counter() - began, 1),
            "rows": [row.__dict__ for row in rows],
            "cpus": os.cpu_count(),
        },
    )
    support.log(f"wrote {path}")


if __name__ == "__main__":
    main()
