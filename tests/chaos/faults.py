"""The fault injector: faults at seeded random times, several at once.

``plan_faults`` draws the plan from a seeded random generator: every kind once, then
more of them, each at a random time of the window with a random length. The
``Injector`` carries each one out in a thread of its own at its time, so faults
overlap; a fault on a role or a store waits for one already holding it. ``Watch``
restarts a role that exited by itself and reports it, unless a poison job ended it.
Every fault carried out is recorded (``Fault``) with the process it hit.
"""

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar
from uuid import UUID

import psycopg
import redis
from tests.chaos.deployment import (
    CRASH_EXIT,
    LEADER_TTL,
    LEASE_TTL,
    WORKERS,
    ChaosDeployment,
    Slot,
)
from tests.chaos.history import Fault
from tests.integration.raw_events import write_undecodable

from jobledger.adapters.store import open_ledger

# The kinds, as the report names them.
KILL_API = "kill -9 api"
KILL_PROJECTOR = "kill -9 projector"
KILL_LEADER = "kill -9 leader"
KILL_STANDBY = "kill -9 standby"
KILL_WORKER = "kill -9 worker"
STOP_LEADER = "SIGSTOP leader"
STOP_WORKER = "SIGSTOP worker"
FLUSH_REDIS = "redis FLUSHALL"
KILL_REDIS = "redis kill -9"
FREEZE_REDIS = "redis SIGSTOP"
KILL_POSTGRES = "postgres kill -9"
FREEZE_POSTGRES = "postgres SIGSTOP"
TERMINATE_BACKENDS = "pg_terminate_backend"
CLOCK = "worker clock offset"
POISON = "poison handler"
UNPROJECTABLE = "unprojectable event"
POISON_CRASH = "poison crash"  # not planned: a worker a poison job ended

KINDS = (
    KILL_API, KILL_PROJECTOR, KILL_LEADER, KILL_STANDBY, KILL_WORKER, STOP_LEADER,
    STOP_WORKER, FLUSH_REDIS, KILL_REDIS, FREEZE_REDIS, KILL_POSTGRES, FREEZE_POSTGRES,
    TERMINATE_BACKENDS, CLOCK, POISON, UNPROJECTABLE,
)  # fmt: skip
REDIS, POSTGRESQL = "redis", "postgresql"
HOLD_TIMEOUT = 30.0  # how long a fault waits for its role or store to be free
T = TypeVar("T")


@dataclass(frozen=True)
class Planned:
    """A fault of the plan: when (seconds into the window), what, for how long (a
    role down or stopped, a store down, a clock off), on which worker, how far off."""

    at: float
    kind: str
    hold: float = 0.0
    worker: str = ""
    offset: float = 0.0
    count: int = 1  # connections to terminate


def plan_faults(rng: random.Random, window: float, every: float) -> list[Planned]:
    """Every kind once, then one more every ``every`` seconds on average, in the
    window less its first 5 s and a tail in which the last faults end."""
    first, last = 5.0, max(window - 12.0, 6.0)
    kinds = list(KINDS)
    rng.shuffle(kinds)
    extra = max(int((last - first) / every) - len(kinds), 0)
    kinds += [rng.choice(KINDS) for _ in range(extra)]
    return sorted(
        (_planned(rng, kind, rng.uniform(first, last)) for kind in kinds), key=lambda p: p.at
    )


def _planned(rng: random.Random, kind: str, at: float) -> Planned:
    worker = rng.choice(WORKERS)
    holds = {
        STOP_LEADER: rng.uniform(1.5, 3.0) * LEADER_TTL,
        STOP_WORKER: rng.uniform(1.5, 2.5) * LEASE_TTL,
        KILL_REDIS: rng.uniform(1.0, 4.0),
        KILL_POSTGRES: rng.uniform(1.0, 4.0),
        # A server that hangs without closing its connections, past every ttl.
        FREEZE_REDIS: rng.uniform(3.0, 8.0),
        FREEZE_POSTGRES: rng.uniform(3.0, 8.0),
        CLOCK: rng.uniform(8.0, 15.0),
    }
    hold = holds.get(kind, rng.uniform(0.5, 3.0))
    # A clock ahead: a worker behind would record shorter back-offs (see the docs).
    offset = rng.uniform(1.0, 4.0)
    return Planned(at, kind, hold, worker, round(offset, 3), rng.randint(1, 4))


@dataclass
class Injector:
    """Carries out a plan on a deployment; see the module docstring."""

    deployment: ChaosDeployment
    plan: list[Planned]
    submit_poison: Callable[[], None]
    rng: random.Random
    faults: list[Fault] = field(default_factory=list)
    injected: set[UUID] = field(default_factory=set)  # streams of unprojectable events
    skipped: list[str] = field(default_factory=list)
    progress: Callable[[str], None] = lambda _: None
    _threads: list[threading.Thread] = field(default_factory=list)
    _stores: dict[str, threading.Lock] = field(
        default_factory=lambda: {REDIS: threading.Lock(), POSTGRESQL: threading.Lock()}
    )

    def start(self, started: float) -> None:
        """Begin the plan, its times counted from ``started`` (monotonic)."""
        timer = threading.Thread(target=self._run, args=(started,), daemon=True)
        timer.start()
        self._threads.append(timer)

    def join(self, timeout: float = 60) -> None:
        """Wait until every fault of the plan has been carried out and undone."""
        deadline = time.monotonic() + timeout
        while self._threads and time.monotonic() < deadline:
            self._threads[0].join(max(deadline - time.monotonic(), 0.0))
            if not self._threads[0].is_alive():
                self._threads.pop(0)

    def _run(self, started: float) -> None:
        for planned in self.plan:
            time.sleep(max(started + planned.at - time.monotonic(), 0.0))
            thread = threading.Thread(target=self._carry_out, args=(planned,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _carry_out(self, planned: Planned) -> None:
        actions: dict[str, Callable[[Planned], Fault | None]] = {
            KILL_API: lambda p: self._kill(self.deployment.slots["api"], p),
            KILL_PROJECTOR: lambda p: self._kill(self.deployment.slots["projector"], p),
            KILL_LEADER: lambda p: self._kill(self._scheduler(leading=True), p),
            KILL_STANDBY: lambda p: self._kill(self._scheduler(leading=False), p),
            KILL_WORKER: lambda p: self._kill(self.deployment.slots[p.worker], p),
            STOP_LEADER: lambda p: self._stop(self._scheduler(leading=True), p),
            STOP_WORKER: lambda p: self._stop(self.deployment.slots[p.worker], p),
            FLUSH_REDIS: self._flush_redis,
            KILL_REDIS: self._kill_redis,
            FREEZE_REDIS: self._freeze_redis,
            KILL_POSTGRES: self._kill_postgres,
            FREEZE_POSTGRES: self._freeze_postgres,
            TERMINATE_BACKENDS: self._terminate_backends,
            CLOCK: self._offset_clock,
            POISON: self._poison,
            UNPROJECTABLE: self._unprojectable,
        }
        try:
            fault = actions[planned.kind](planned)
        except Exception as error:  # noqa: BLE001 (a fault that cannot be made is reported, the run goes on)
            self.skipped.append(f"{planned.kind}: {type(error).__name__}: {error}")
            return
        if fault is None:
            self.skipped.append(f"{planned.kind}: its target was busy or absent")
            return
        self.faults.append(fault)
        self.progress(f"fault {fault.kind} on {fault.target} for {_length(fault):.1f} s")

    # ---- roles ----------------------------------------------------------------------

    def _scheduler(self, *, leading: bool) -> Slot | None:
        """The leader or the standby; while no scheduler leads (Redis lost the lock),
        wait for one to."""
        deadline = time.monotonic() + HOLD_TIMEOUT
        while (leader := self.deployment.leader()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if leader is None or leading:
            return leader
        schedulers = [self.deployment.slots[n] for n in ("scheduler1", "scheduler2")]
        return next((s for s in schedulers if s is not leader), None)

    def _kill(self, slot: Slot | None, planned: Planned) -> Fault | None:
        if slot is None or not slot.lock.acquire(timeout=HOLD_TIMEOUT):
            return None
        try:
            pid, start = slot.pid, _now()
            slot.kill()
            time.sleep(planned.hold)
            slot.start()
            return Fault(planned.kind, slot.name, start, _now(), pid)
        finally:
            slot.lock.release()

    def _stop(self, slot: Slot | None, planned: Planned) -> Fault | None:
        if slot is None or not slot.lock.acquire(timeout=HOLD_TIMEOUT):
            return None
        try:
            pid, start = slot.pid, _now()
            slot.signal(signal.SIGSTOP)
            time.sleep(planned.hold)
            slot.signal(signal.SIGCONT)
            return Fault(planned.kind, slot.name, start, _now(), pid)
        finally:
            slot.lock.release()

    def _offset_clock(self, planned: Planned) -> Fault | None:
        """The worker stops (handing its runs back) and starts again with its clock off;
        after the hold, the same again with the right clock."""
        slot = self.deployment.slots[planned.worker]
        if not slot.lock.acquire(timeout=HOLD_TIMEOUT):
            return None
        try:
            start = _now()
            slot.stop()
            slot.start(clock_offset=planned.offset)
            pid = slot.pid
            time.sleep(planned.hold)
            slot.stop()
            slot.start()
            return Fault(CLOCK, f"{slot.name} {planned.offset:+.1f} s", start, _now(), pid)
        finally:
            slot.lock.release()

    # ---- stores ---------------------------------------------------------------------

    def _flush_redis(self, planned: Planned) -> Fault | None:
        with self._stores[REDIS]:
            client = redis.Redis.from_url(self.deployment.redis.url, socket_timeout=5)
            try:
                at = _now()
                client.flushall()
            finally:
                client.close()
            return Fault(planned.kind, REDIS, at, at)

    def _kill_redis(self, planned: Planned) -> Fault | None:
        with self._stores[REDIS]:
            server = self.deployment.redis
            start = _now()
            server.kill()
            time.sleep(planned.hold)
            server.start()
            return Fault(planned.kind, REDIS, start, _now())

    def _freeze_redis(self, planned: Planned) -> Fault:
        """SIGSTOP of the server for the hold: its connections stay open, unanswered."""
        server = self.deployment.redis
        return self._frozen(REDIS, planned, server.freeze, lambda _: server.thaw())

    def _freeze_postgres(self, planned: Planned) -> Fault:
        """SIGSTOP of every process of the cluster for the hold, as ``_freeze_redis``."""
        cluster = self.deployment.postgres
        return self._frozen(POSTGRESQL, planned, cluster.freeze, cluster.thaw)

    def _frozen(
        self, store: str, planned: Planned, freeze: Callable[[], T], thaw: Callable[[T], None]
    ) -> Fault:
        with self._stores[store]:
            start = _now()
            frozen = freeze()
            try:
                time.sleep(planned.hold)
            finally:
                thaw(frozen)
            return Fault(planned.kind, store, start, _now())

    def _kill_postgres(self, planned: Planned) -> Fault | None:
        with self._stores[POSTGRESQL]:
            cluster = self.deployment.postgres
            start = _now()
            cluster.crash()
            time.sleep(planned.hold)
            for attempt in range(3):
                try:
                    cluster.start()
                    break
                except AssertionError:
                    if attempt == 2:
                        raise
                    time.sleep(1)
            return Fault(planned.kind, POSTGRESQL, start, _now())

    def _terminate_backends(self, planned: Planned) -> Fault | None:
        with self._stores[POSTGRESQL]:
            url = self.deployment.postgres.admin_url
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as admin:
                rows = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = 'jobledger'"
                    " AND pid <> pg_backend_pid() ORDER BY pid"
                ).fetchall()
                chosen = self.rng.sample([r[0] for r in rows], min(planned.count, len(rows)))
                at = _now()
                for pid in chosen:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return Fault(planned.kind, POSTGRESQL, at, at)

    # ---- work that breaks things -------------------------------------------------------

    def _poison(self, planned: Planned) -> Fault:
        at = _now()
        self.submit_poison()
        return Fault(planned.kind, "api", at, at)

    def _unprojectable(self, planned: Planned) -> Fault:
        """An event written straight into the log that no projection can apply (tried
        again while PostgreSQL is down)."""
        deadline = time.monotonic() + HOLD_TIMEOUT * 2
        while True:
            try:
                ledger = open_ledger(self.deployment.settings())
                try:
                    at = _now()
                    stream = write_undecodable(ledger, "jobledger:ExecutionEnqueued")
                finally:
                    ledger.close()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
                continue
            self.injected.add(stream)
            return Fault(planned.kind, POSTGRESQL, at, at)


@dataclass
class Watch:
    """Restarts a role that exited when no fault holds it. A poison job's crash is a
    fault; a start refused because a store was down (the start check, by design: as a
    supervisor would, the watch starts it again) is counted; any other exit is a
    violation, described in ``exits``."""

    deployment: ChaosDeployment
    faults: list[Fault]
    exits: list[str] = field(default_factory=list)
    refused: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for slot in self.deployment.slots.values():
                if slot.lock.acquire(blocking=False):
                    try:
                        self._check(slot)
                    finally:
                        slot.lock.release()

    def _check(self, slot: Slot) -> None:
        code = slot.exit_code()
        if code is None:
            return
        at, pid = _now(), slot.pid
        if slot.name in WORKERS and code == CRASH_EXIT:
            self.faults.append(Fault(POISON_CRASH, slot.name, at, at, pid))
        elif slot.refused_at_start():
            self.refused += 1
            time.sleep(1)
        else:
            self.exits.append(f"{slot.name}: exited with {code} at {at.isoformat()}: {slot.tail()}")
        with contextlib.suppress(Exception):
            slot.kill()  # closes its log
        slot.start()


def _now() -> datetime:
    return datetime.now(UTC)


def _length(fault: Fault) -> float:
    return (fault.end - fault.start).total_seconds()
