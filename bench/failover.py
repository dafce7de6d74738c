"""Scheduler fail-over: kill -9 of the leader of two `jobledger scheduler` processes.

Starts a private redis-server on a free loopback port (persistence off) and, for every
trial, a throwaway PostgreSQL database and a Redis prefix of its own; stops the server,
the scheduler processes and drops the databases at the end, also on an error or Ctrl-C.

    python -m bench.failover [--quick] [--trials N] [--admin-url URL]

Each trial schedules one-shot jobs due every 0.25 s, starts two scheduler processes
with the shipped leader timing (no JOBLEDGER_LEADER_* variables), waits until fires
flow, kills the leader (the pid in the Redis lock token) with SIGKILL at a random
point of its renewal cycle, and keeps the standby running until every job fired. The
gap is the first fire of the new leader's epoch (its event timestamp) minus the kill.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Self

import redis

from bench import _support as support
from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.store import migrate, open_ledger
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.job import Job
from jobledger.domain.schedules import OneShotSchedule
from jobledger.infra.settings import Settings, load_settings
from jobledger.services.actors import operator_of_store
from jobledger.services.jobs import Jobs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobledger.persistence.ledger import Ledger

TRIALS = 10
QUICK_TRIALS = 3
STEP = 0.25  # seconds between two due jobs
LEAD = 4.0  # seconds from scheduling to the first due job (the processes start meanwhile)
WINDOW = 12.0  # seconds over which jobs fall due: 48 jobs per trial
FIRES_BEFORE_KILL = 8  # "fires flow": this many fired before the kill
KILL_JITTER = 1.0  # a random wait after that, so the kill lands anywhere in a renewal
MIN_JOBS_AFTER_KILL = 6.0  # seconds of jobs that must still be due after the kill
SETTLE_TIMEOUT = 20.0  # seconds after the last due job for every job to be fired
START_TIMEOUT = 15.0
POLL = 0.02
TARGET_GAP_S = 5.0


@dataclass(frozen=True)
class Fire:
    job_id: uuid.UUID
    scheduled_for: datetime
    at: datetime  # the event timestamp: when the scheduler made the event
    epoch: int


@dataclass(frozen=True)
class Observed:
    """What one trial saw, before it is summarised."""

    jobs: list[uuid.UUID]
    fires: list[Fire]
    recorded_missed: set[uuid.UUID]
    killed_at: datetime
    victim_epoch: int
    takeover_s: float | None  # kill -> a new token in the Redis lock (polled)
    new_leader_ok: bool  # the survivor holds the lock at the end
    log_events: Counter[str]


@dataclass(frozen=True)
class Trial:
    trial: int
    jobs: int
    fired: int
    epochs: int
    takeover_s: float | None
    gap_s: float | None
    backlog: int  # occurrences the new leader fired that were due by its first fire
    worst_late_s: float | None  # the latest of those (fire timestamp - scheduled_for)
    max_late_s: float  # over every fire of the trial
    duplicates: int
    misses: int
    recorded_missed: int
    unexplained: int
    elected: int  # leader.elected log lines (2: the first leader and its successor)
    conflicts: int  # scheduler.fire_conflict log lines (fencing at work)
    errors: int  # scheduler.tick_failed log lines
    note: str


# ---- scheduler processes ---------------------------------------------------------------


class Schedulers:
    """`jobledger scheduler` child processes, each in its own session, logging JSON lines
    to a file; every one still running is stopped on exit."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        self._settings = settings
        self._folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []
        self.killed: set[int] = set()

    def start(self) -> subprocess.Popen[bytes]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
        environ |= {
            "JOBLEDGER_DATABASE_URL": self._settings.database_url,
            "JOBLEDGER_REDIS_URL": self._settings.redis_url,
            "JOBLEDGER_REDIS_PREFIX": self._settings.redis_prefix,
            "JOBLEDGER_LOG_FORMAT": "json",
            "JOBLEDGER_LOG_LEVEL": "info",
            "JOBLEDGER_TEST_HANDLERS": "true",
        }
        path = self._folder / f"scheduler-{len(self.processes)}.log"
        with path.open("wb") as output:
            # Its own session: Ctrl-C reaches this script only, which then stops it.
            process = subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", "scheduler"],
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=output,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def pids(self) -> set[int]:
        return {p.pid for p in self.processes}

    def check_alive(self) -> None:
        for number, process in enumerate(self.processes):
            if process.pid not in self.killed and process.poll() is not None:
                tail = self.log_tail(number)
                raise RuntimeError(
                    f"scheduler {process.pid} exited with {process.returncode}: {tail}"
                )

    def kill(self, pid: int) -> None:
        process = next(p for p in self.processes if p.pid == pid)
        process.send_signal(signal.SIGKILL)
        self.killed.add(pid)
        process.wait()

    def stop(self) -> None:
        running = [p for p in self.processes if p.poll() is None]
        for process in running:
            process.terminate()
        for process in running:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log_tail(self, number: int) -> str:
        path = self._folder / f"scheduler-{number}.log"
        return path.read_text(encoding="utf-8", errors="replace")[-1500:] if path.exists() else ""

    def log_events(self) -> Counter[str]:
        """How often each structured log event was written, over every process."""
        counts: Counter[str] = Counter()
        for path in sorted(self._folder.glob("scheduler-*.log")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if isinstance(record, dict):
                        counts[str(record.get("event", "?"))] += 1
        return counts

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def leader_pid(client: redis.Redis, keys: Keys) -> int | None:
    """The pid in the leader's token (``<host>-<pid>-<random>``), or None when free."""
    token = client.get(keys.leader)
    if token is None:
        return None
    text = token.decode() if isinstance(token, bytes) else str(token)
    return int(text.rsplit("-", 2)[-2])


# ---- the log ---------------------------------------------------------------------------


def schedule_jobs(ledger: Ledger, start: datetime, count: int) -> list[uuid.UUID]:
    """``count`` one-shot jobs due every STEP seconds from ``start``."""
    return [
        Jobs(ledger)
        .schedule(
            JobDefinition(
                name=f"failover {index}",
                spec=ExecutionSpec(handler="test.echo"),
                schedule=OneShotSchedule(start + timedelta(seconds=index * STEP)),
            ),
            at=datetime.now(UTC),
            by=operator_of_store("bench"),
        )
        .id
        for index in range(count)
    ]


def read_fires(ledger: Ledger) -> list[Fire]:
    notifications = ledger.recorder.select_notifications(
        start=1, limit=1_000_000, topics=[Job.Fired.TOPIC]
    )
    events = [ledger.mapper.to_domain_event(n) for n in notifications]
    return [
        Fire(e.originator_id, e.scheduled_for, e.timestamp, e.leader_epoch)
        for e in events
        if isinstance(e, Job.Fired)
    ]


def read_missed(ledger: Ledger) -> set[uuid.UUID]:
    notifications = ledger.recorder.select_notifications(
        start=1, limit=1_000_000, topics=[Job.FiresMissed.TOPIC]
    )
    return {ledger.mapper.to_domain_event(n).originator_id for n in notifications}


def count_topic(ledger: Ledger, topic: str) -> int:
    return len(ledger.recorder.select_notifications(start=1, limit=1_000_000, topics=[topic]))


# ---- one trial -------------------------------------------------------------------------


def observe(settings: Settings, ledger: Ledger, client: redis.Redis, folder: Path) -> Observed:
    keys = Keys(settings.redis_prefix)
    count = round(WINDOW / STEP)
    start = datetime.now(UTC) + timedelta(seconds=LEAD)
    jobs = schedule_jobs(ledger, start, count)
    last_due = start + timedelta(seconds=(count - 1) * STEP)
    with Schedulers(settings, folder) as group:
        group.start()
        group.start()

        def fires_flow() -> bool:
            group.check_alive()
            return count_topic(ledger, Job.Fired.TOPIC) >= FIRES_BEFORE_KILL

        support.wait_for(fires_flow, LEAD + START_TIMEOUT, f"{FIRES_BEFORE_KILL} fires", POLL)
        time.sleep(random.uniform(0.0, KILL_JITTER))
        victim = leader_pid(client, keys)
        if victim is None or victim not in group.pids():
            raise RuntimeError(f"the lock names pid {victim}, not one of {sorted(group.pids())}")
        victim_epoch = int(client.get(keys.leader_epoch) or 0)
        killed_at = datetime.now(UTC)
        if last_due - killed_at < timedelta(seconds=MIN_JOBS_AFTER_KILL):
            raise RuntimeError("fires began too late: too few jobs are left after the kill")
        group.kill(victim)
        support.log(f"  killed the leader (pid {victim}, epoch {victim_epoch})")
        takeover_s = wait_for_takeover(client, keys, victim, killed_at)
        wait_until_settled(ledger, group, len(jobs), last_due)
        survivor = leader_pid(client, keys)
        new_leader_ok = survivor is not None and survivor in group.pids() - group.killed
        group.stop()
        events = group.log_events()
    return Observed(
        jobs=jobs,
        fires=read_fires(ledger),
        recorded_missed=read_missed(ledger),
        killed_at=killed_at,
        victim_epoch=victim_epoch,
        takeover_s=takeover_s,
        new_leader_ok=new_leader_ok,
        log_events=events,
    )


def wait_for_takeover(
    client: redis.Redis, keys: Keys, victim: int, killed_at: datetime
) -> float | None:
    """Seconds from the kill until another process holds the lock (None: not seen)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        holder = leader_pid(client, keys)
        if holder is not None and holder != victim:
            return (datetime.now(UTC) - killed_at).total_seconds()
        time.sleep(POLL)
    return None


def wait_until_settled(ledger: Ledger, group: Schedulers, jobs: int, last_due: datetime) -> None:
    """Until every job fired or was recorded as missed, or the settle timeout."""
    deadline = last_due + timedelta(seconds=SETTLE_TIMEOUT)
    while datetime.now(UTC) < deadline:
        group.check_alive()
        done = count_topic(ledger, Job.Fired.TOPIC) + count_topic(ledger, Job.FiresMissed.TOPIC)
        if done >= jobs:
            return
        time.sleep(0.1)
    support.log(f"  not every job fired within {SETTLE_TIMEOUT:g}s of the last due time")


def summarize(number: int, seen: Observed) -> Trial:
    per_occurrence = Counter((f.job_id, f.scheduled_for) for f in seen.fires)
    fired_jobs = {f.job_id for f in seen.fires}
    never_fired = set(seen.jobs) - fired_jobs
    new = [f for f in seen.fires if f.epoch > seen.victim_epoch]
    gap_s = worst = None
    backlog: list[Fire] = []
    if new:
        first_new = min(f.at for f in new)
        gap_s = (first_new - seen.killed_at).total_seconds()
        backlog = [f for f in new if f.scheduled_for <= first_new]
        worst = max(late(f) for f in backlog)
    notes = []
    if not new:
        notes.append("no fire by a new epoch")
    if not seen.new_leader_ok:
        notes.append("the survivor does not hold the lock")
    return Trial(
        trial=number,
        jobs=len(seen.jobs),
        fired=len(seen.fires),
        epochs=len({f.epoch for f in seen.fires}),
        takeover_s=round3(seen.takeover_s),
        gap_s=round3(gap_s),
        backlog=len(backlog),
        worst_late_s=round3(worst),
        max_late_s=round(max((late(f) for f in seen.fires), default=0.0), 3),
        duplicates=sum(1 for n in per_occurrence.values() if n > 1),
        misses=len(never_fired),
        recorded_missed=len(never_fired & seen.recorded_missed),
        unexplained=len(never_fired - seen.recorded_missed),
        elected=seen.log_events["leader.elected"],
        conflicts=seen.log_events["scheduler.fire_conflict"],
        errors=seen.log_events["scheduler.tick_failed"],
        note="; ".join(notes),
    )


def late(fire: Fire) -> float:
    return (fire.at - fire.scheduled_for).total_seconds()


def round3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_trial(number: int, admin_url: str, redis_url: str) -> Trial:
    with support.throwaway_postgres(admin_url) as url:
        migrate(load_settings({}, test_handlers="true", database_url=url), progress=lambda _: None)
        settings = load_settings(
            {},
            test_handlers="true",
            database_url=url,
            redis_url=redis_url,
            redis_prefix=f"failover{number}-{uuid.uuid4().hex[:6]}",
        )
        ledger = open_ledger(settings)
        client = redis.Redis.from_url(redis_url)
        try:
            with tempfile.TemporaryDirectory(prefix="jobledger-bench-failover-") as folder:
                seen = observe(settings, ledger, client, Path(folder))
        finally:
            client.close()
            ledger.close()
    return summarize(number, seen)


def run_all(admin_url: str, redis_url: str, trials: int) -> list[Trial]:
    done: list[Trial] = []
    for number in range(1, trials + 1):
        support.log(f"trial {number}/{trials}: start")
        trial = run_trial(number, admin_url, redis_url)
        support.log(
            f"trial {number}/{trials}: gap {support.show(trial.gap_s)}s, "
            f"{trial.fired}/{trial.jobs} fired, {trial.duplicates} duplicates"
        )
        done.append(trial)
    return done


# ---- services --------------------------------------------------------------------------


# ---- output ----------------------------------------------------------------------------

COLUMNS = (
    ("trial", "{:>5}"),
    ("jobs", "{:>4}"),
    ("fired", "{:>5}"),
    ("epochs", "{:>6}"),
    ("takeover_s", "{:>10}"),
    ("gap_s", "{:>6}"),
    ("backlog", "{:>7}"),
    ("worst_late_s", "{:>12}"),
    ("max_late_s", "{:>10}"),
    ("duplicates", "{:>10}"),
    ("misses", "{:>6}"),
    ("unexplained", "{:>11}"),
    ("elected", "{:>7}"),
    ("conflicts", "{:>9}"),
    ("errors", "{:>6}"),
    ("note", "{}"),
)


def summary(rows: Sequence[Trial]) -> dict[str, object]:
    gaps = sorted(r.gap_s for r in rows if r.gap_s is not None)
    worst = [r.worst_late_s for r in rows if r.worst_late_s is not None]
    without_gap = len(rows) - len(gaps)
    duplicates = sum(r.duplicates for r in rows)
    unexplained = sum(r.unexplained for r in rows)
    return {
        "trials": len(rows),
        "gap_min_s": gaps[0] if gaps else None,
        "gap_median_s": round(statistics.median(gaps), 3) if gaps else None,
        "gap_max_s": gaps[-1] if gaps else None,
        "trials_without_takeover": without_gap,
        "worst_late_in_gap_s": max(worst) if worst else None,
        "duplicates": duplicates,
        "misses": sum(r.misses for r in rows),
        "recorded_missed": sum(r.recorded_missed for r in rows),
        "unexplained_misses": unexplained,
        "conflicts": sum(r.conflicts for r in rows),
        "errors": sum(r.errors for r in rows),
        "target_gap_met": bool(gaps) and not without_gap and gaps[-1] <= TARGET_GAP_S,
        "target_duplicates_met": duplicates == 0,
        "target_unexplained_met": unexplained == 0,
    }


def format_summary(result: dict[str, object], settings: Settings) -> str:
    def met(key: str) -> str:
        return "met" if result[key] else "MISSED"

    timing = (
        f"leader ttl {settings.leader_ttl_ms} ms, renew {settings.leader_renew_ms} ms, "
        f"poll {settings.leader_poll_ms} ms, tick {settings.scheduler_tick_ms} ms"
    )
    gaps = (
        f"min {support.show(result['gap_min_s'])}, median {support.show(result['gap_median_s'])}, "
        f"max {support.show(result['gap_max_s'])}"
    )
    misses = (
        f"{result['misses']} (recorded as missed: {result['recorded_missed']}, "
        f"unexplained: {result['unexplained_misses']})"
    )
    lines = [
        f"summary over {result['trials']} trials ({timing})",
        f"  gap_s: {gaps}   target max <= {TARGET_GAP_S:g} s: {met('target_gap_met')}",
        f"  worst lateness due in the gap: {support.show(result['worst_late_in_gap_s'])} s",
        f"  duplicates: {result['duplicates']}   target 0: {met('target_duplicates_met')}",
        f"  misses: {misses}   target 0 unexplained: {met('target_unexplained_met')}",
        f"  fire conflicts logged: {result['conflicts']}, tick errors: {result['errors']}",
    ]
    return "\n".join(lines)


def write_json(
    rows: Sequence[Trial],
    result: dict[str, object],
    settings: Settings,
    *,
    quick: bool,
    store: str,
    load_before: list[float],
) -> Path:
    stem = f"failover{'-quick' if quick else ''}"
    document = {
        "benchmark": "failover",
        "recorded_at": support.recorded_at(),
        "store": store,
        "quick": quick,
        **support.machine(),
        "load_average_before": load_before,
        "load_average_after": support.load_average(),
        "leader_ttl_ms": settings.leader_ttl_ms,
        "leader_renew_ms": settings.leader_renew_ms,
        "leader_poll_ms": settings.leader_poll_ms,
        "scheduler_tick_ms": settings.scheduler_tick_ms,
        "jobs_per_trial": round(WINDOW / STEP),
        "job_step_s": STEP,
        "target_gap_max_s": TARGET_GAP_S,
        "summary": result,
        "trials": [asdict(row) for row in rows],
    }
    return support.write_json(stem, document)


# ---- entry point -----------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("use 1 or more")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument(
        "--trials",
        type=positive,
        help=f"how many trials (default {TRIALS}, --quick {QUICK_TRIALS})",
    )
    parser.add_argument("--quick", action="store_true", help="3 trials, for a smoke test")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    trials = args.trials or (QUICK_TRIALS if args.quick else TRIALS)
    defaults = load_settings({})  # the shipped leader timing the processes run with
    try:
        with support.private_redis() as redis_url:
            store = support.versions(args.admin_url, redis_url)
            before = support.load_average()
            support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {before}")
            rows = run_all(args.admin_url, redis_url, trials)
    except KeyboardInterrupt:
        support.log(
            "interrupted; the schedulers and redis-server were stopped, the database dropped"
        )
        return 130
    result = summary(rows)
    print(support.format_table(rows, COLUMNS))
    print()
    print(format_summary(result, defaults))
    path = write_json(rows, result, defaults, quick=args.quick, store=store, load_before=before)
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
