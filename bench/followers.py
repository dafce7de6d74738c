"""Followers: the CPU each of the projector's followers spends on a drain's events.

Creates a throwaway PostgreSQL database and a private redis-server, enqueues N runs,
lets the projector's three followers (the queue, the checkpoint, the read models) catch
up with them, then writes a drain as one worker writes it (commits of 8 leases and the
8 completions of the previous round) and times each follower's steps over the drain
alone, one follower after the other, in this process. The client's CPU is this
process's; PostgreSQL's is that of its processes and the database's sessions; Redis's
that of the private server. Drops the database and stops the server at the end, also
on an error or Ctrl-C.

Unlike ``throughput.py``, whose drains share two cores with the workers and vary with
the machine from one minute to the next, the rows come from the followers alone over the
same events, so a change to a follower shows in them.

    python -m bench.followers [--quick] [--runs N] [--repeat N]
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import psycopg

from bench import _support as support
from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.projection import verify_queue

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from jobledger.persistence.ledger import Ledger

ROUND = 8  # leases a worker's round records, with the previous round's completions
ENQUEUE_BATCH = 500
# Events a page of each follower holds in a drain of about 3,500 runs a second (7,000
# events): the queue's pages start 5 ms apart, the checkpoint gathers 250 ms, the read
# models 20 ms.
PAGES = {"queue": 40, "checkpoint": 2000, "read_models": 140}
COLUMNS: support.Columns = (
    ("follower", "{:<12}"),
    ("page", "{:>5}"),
    ("events", "{:>7}"),
    ("client_us", "{:>9}"),
    ("postgres_us", "{:>11}"),
    ("redis_us", "{:>8}"),
    ("total_us", "{:>8}"),
    ("per_run_us", "{:>10}"),
    ("spread_us", "{:>9}"),
)


class _Follower(Protocol):
    def step(self) -> bool: ...


@dataclass
class Sizes:
    runs: int
    repeat: int


@dataclass
class Row:
    """One follower over the drain: CPU microseconds per drain event, medians of the
    repetitions (``spread_us``: the largest total less the smallest)."""

    follower: str
    page: int
    events: int
    client_us: float
    postgres_us: float
    redis_us: float
    total_us: float
    per_run_us: float
    spread_us: float


@dataclass
class Sample:
    client: float
    postgres: float
    redis: float
    events: int


def enqueue(ledger: Ledger, runs: int) -> list[Execution]:
    spec = ExecutionSpec(handler="test.echo", payload={"n": 1})
    now = datetime.now(UTC)
    made = [Execution.enqueue(spec=spec, ready_at=now, trigger=Trigger.ADHOC) for _ in range(runs)]
    for start in range(0, runs, ENQUEUE_BATCH):
        ledger.save(*made[start : start + ENQUEUE_BATCH])
    return made


def drain(ledger: Ledger, runs: list[Execution]) -> None:
    """Rounds as a worker records them: the next 8 leases with the last 8 outcomes."""
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    previous: list[tuple[Execution, uuid.UUID]] = []
    progress = support.Progress("drain written", len(runs))
    progress(0)
    for start in range(0, len(runs) + ROUND, ROUND):
        leased = [(run, uuid.uuid4()) for run in runs[start : start + ROUND]]
        for run, lease_id in leased:
            run.lease(worker_id="bench", lease_id=lease_id, lease_expires_at=deadline)
        for run, lease_id in previous:
            run.complete(lease_id=lease_id, duration=timedelta(milliseconds=1), result={})
        if leased or previous:
            ledger.save(*(run for run, _ in previous), *(run for run, _ in leased))
        progress(min(start + ROUND, len(runs)))
        previous = leased


def postgres_pids(url: str) -> list[int]:
    database = f" {url.rpartition('/')[2]} "
    return support.pids_named("postgres", title=lambda t: database in t or "(" not in t)


def followers(container: Container) -> dict[str, _Follower]:
    projector = container.projector()
    if projector.read_models is None:
        raise SystemExit("the projector has no read models: the store is not PostgreSQL")
    for reader in projector.readers:
        reader.hold()  # as the projector's start does
    return {
        "queue": projector.queue,
        "checkpoint": projector.checkpoint,
        "read_models": projector.read_models,
    }


def catch_up(follower: _Follower) -> None:
    while follower.step():
        pass


def cpu_by_pid(pids: Sequence[int]) -> dict[int, float]:
    return {pid: support.cpu_seconds([pid]) for pid in pids}


def cpu_since(before: dict[int, float], pids: Sequence[int]) -> float:
    """CPU seconds of ``pids`` since ``before``: a session that ended meanwhile counts
    nothing (its last CPU is unknown), one that began counts whole."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in cpu_by_pid(pids).items())


def timed(follower: _Follower, url: str, redis_pid: int) -> tuple[float, float, float]:
    pg_before = cpu_by_pid(postgres_pids(url))
    redis_before = support.cpu_seconds([redis_pid])
    client = time.process_time()
    catch_up(follower)
    client = time.process_time() - client
    pg = cpu_since(pg_before, postgres_pids(url))
    return client, pg, support.cpu_seconds([redis_pid]) - redis_before


def set_pages(found: dict[str, _Follower]) -> None:
    for name, follower in found.items():
        # The read models keep their reader private.
        reader = getattr(follower, "reader", None) or getattr(follower, "_reader", None)
        if reader is None:
            raise SystemExit(f"the {name} follower has no log reader")
        reader.page_size = PAGES[name]


def one_round(url: str, redis_url: str, runs: int, prefix: str) -> dict[str, Sample]:
    settings = load_settings(
        {}, test_handlers="true", database_url=url, redis_url=redis_url, redis_prefix=prefix
    )
    with bootstrap(settings) as container:
        made = enqueue(container.ledger, runs)
        found = followers(container)
        for follower in found.values():
            catch_up(follower)  # the enqueued runs, outside the timing
        start = container.ledger.recorder.max_notification_id() or 0
        drain(container.ledger, made)
        head = container.ledger.recorder.max_notification_id() or 0
        with psycopg.connect(url, autocommit=True) as conn:
            support.analyze(conn, "drain")
        set_pages(found)
        redis_pid = support.redis_server_pid(redis_url)
        samples = {}
        for name, follower in found.items():
            client, pg, redis = timed(follower, url, redis_pid)
            samples[name] = Sample(client, pg, redis, head - start)
            support.log(
                f"{name}: {client:.2f} s client, {pg:.2f} s PostgreSQL, {redis:.2f} s Redis"
            )
        check(container)
    return samples


def check(container: Container) -> None:
    """The queue equals the log's open runs, and every run left it."""
    differences = verify_queue(container.reader(), container.queue, scratch=MemoryQueue())
    if differences:
        raise SystemExit(f"the queue differs from the log: {differences[:3]}")
    depths = container.queue.depths("default", now=datetime.now(UTC))
    if depths.ready or depths.leased:
        raise SystemExit(f"runs left in the queue after the drain: {depths}")


def summarize(name: str, samples: Sequence[Sample], runs: int) -> Row:
    events = samples[0].events

    def per_event(seconds: float) -> float:
        return round(1e6 * seconds / events, 2)

    totals = [s.client + s.postgres + s.redis for s in samples]
    total = statistics.median(totals)
    return Row(
        follower=name,
        page=PAGES[name],
        events=events,
        client_us=per_event(statistics.median(s.client for s in samples)),
        postgres_us=per_event(statistics.median(s.postgres for s in samples)),
        redis_us=per_event(statistics.median(s.redis for s in samples)),
        total_us=per_event(total),
        per_run_us=round(1e6 * total / runs, 1),
        spread_us=per_event(max(totals) - min(totals)),
    )


def run(args: argparse.Namespace, size: Sizes) -> list[Row]:
    collected: dict[str, list[Sample]] = {name: [] for name in PAGES}
    with support.throwaway_postgres(args.admin_url) as url, support.private_redis() as redis_url:
        migrate(load_settings({}, database_url=url), progress=support.log)
        for repetition in range(size.repeat):
            support.log(f"round {repetition + 1}/{size.repeat}: {size.runs:,} runs")
            found = one_round(url, redis_url, size.runs, f"f{repetition}")
            for name, sample in found.items():
                collected[name].append(sample)
    return [summarize(name, samples, size.runs) for name, samples in collected.items()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="3,000 runs, one round")
    parser.add_argument("--runs", type=int, help="runs enqueued and drained (default 20,000)")
    parser.add_argument("--repeat", type=int, help="rounds, the median counts (default 3)")
    args = parser.parse_args(argv)
    size = Sizes(
        runs=args.runs or (3_000 if args.quick else 20_000),
        repeat=args.repeat or (1 if args.quick else 3),
    )
    rows = run(args, size)
    print(
        f"{size.runs:,} runs drained in rounds of {ROUND} leases and {ROUND} completions; "
        "CPU microseconds per drain event (medians of the rounds), per run (two events)"
    )
    print(support.format_table(rows, COLUMNS))
    store = support.postgres_version(args.admin_url)
    support.write_rows("followers", quick=args.quick, store=store, sizes=size, rows=rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
