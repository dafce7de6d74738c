"""Leader election: one scheduler acts; the others stand by and take over fast.

The lock is a Redis key set with NX and a ttl, holding a random token; the leader
renews it every ttl/3 with a compare-and-set script and releases it with a
compare-and-delete. Each new leader raises an epoch counter in the same script, and
the epoch goes into every ``JobFired``.

The lock alone cannot stop a leader that was paused past its ttl, so the leader also
keeps a deadline on its own monotonic clock (the start of its last successful renewal
plus the ttl) and stops acting once that passes. What really prevents a double fire is
the log (deterministic execution ids and the Job's expected version): see ADR 9.
"""

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

import redis
import structlog

from jobledger.projections.redis_keys import Keys
from jobledger.runtime.outages import REDIS, DependencyHealth

log = structlog.get_logger(__name__)

Clock = Callable[[], float]


class Leadership(Protocol):
    """Who may act now. ``tick`` is called often; ``is_leader`` before every action."""

    @property
    def epoch(self) -> int: ...

    @property
    def changes(self) -> int:
        """How often leadership was gained or lost so far."""
        ...

    def tick(self) -> None: ...

    def is_leader(self) -> bool: ...

    def release(self) -> None: ...


class LocalLeadership:
    """The embedded mode: one process, always the leader."""

    epoch = 1
    changes = 0

    def tick(self) -> None:
        return None

    def is_leader(self) -> bool:
        return True

    def release(self) -> None:
        return None


@dataclass(frozen=True)
class LeaderTiming:
    """Failover takes at most ``ttl + poll`` after the leader dies (defaults: 3.5 s)."""

    ttl: float = 3.0
    renew_every: float = 1.0  # ttl/3: two renewals may fail before the lock lapses
    poll: float = 0.5  # how often a standby tries to take the lock


class RedisLeadership:
    """Leader election on one Redis key; see the module docstring."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        timing: LeaderTiming = LeaderTiming(),
        clock: Clock = time.monotonic,
        name: str = "scheduler",
        health: DependencyHealth | None = None,
    ) -> None:
        self._client = client
        self._health = health or DependencyHealth("scheduler")
        self._keys = keys
        self._timing = timing
        self._clock = clock
        self.token = f"{name}-{secrets.token_hex(8)}"
        self._epoch = 0
        self._leading = False
        self._deadline = 0.0
        self._next_attempt = 0.0
        self.changes = 0  # leadership gained or lost: a metric
        self._acquire = _script(client, "leader_acquire")
        self._renew = _script(client, "leader_renew")
        self._release = _script(client, "leader_release")

    @property
    def epoch(self) -> int:
        return self._epoch

    def is_leader(self) -> bool:
        return self._leading and self._clock() < self._deadline

    def tick(self) -> None:
        now = self._clock()
        if self._leading and now >= self._deadline:
            self._step_down("deadline passed without a renewal")
        if now < self._next_attempt:
            return
        try:
            if self._leading:
                self._try_renew(now)
            else:
                self._try_acquire(now)
        except redis.RedisError as error:
            # Unreachable Redis: keep the deadline; acting stops when it passes. An
            # outage is said once, by the tracker; tries go on at the poll interval.
            if self._health.report(error, self._health.clock()) is None:
                log.warning("leader.redis_error", scheduler_id=self.token, error=str(error))
            self._next_attempt = now + self._timing.poll
        else:
            self._health.succeeded(REDIS, self._health.clock())

    def release(self) -> None:
        if self._leading:
            try:
                self._release(keys=[self._keys.leader], args=[self.token])
            except redis.RedisError as error:
                # The lock lapses by its ttl instead.
                self._health.report(error, self._health.clock())
            self._step_down("released")

    def _try_acquire(self, started: float) -> None:
        ttl_ms = int(self._timing.ttl * 1000)
        epoch = int(
            self._acquire(
                keys=[self._keys.leader, self._keys.leader_epoch], args=[self.token, ttl_ms]
            )
        )
        if epoch:
            self._leading, self._epoch = True, epoch
            self._deadline = started + self._timing.ttl
            self._next_attempt = started + self._timing.renew_every
            self.changes += 1
            log.info("leader.elected", scheduler_id=self.token, leader_epoch=epoch)
        else:
            self._next_attempt = started + self._timing.poll

    def _try_renew(self, started: float) -> None:
        ttl_ms = int(self._timing.ttl * 1000)
        if int(self._renew(keys=[self._keys.leader], args=[self.token, ttl_ms])):
            # Measured from before the call: the lock may have been set at any point of it.
            self._deadline = started + self._timing.ttl
            self._next_attempt = started + self._timing.renew_every
        else:
            self._step_down("lock taken by another scheduler")
            self._next_attempt = started + self._timing.poll

    def _step_down(self, reason: str) -> None:
        if self._leading:
            self._leading = False
            self.changes += 1
            # Handing the lock over on shutdown is routine; losing it is worth a warning.
            level = log.info if reason == "released" else log.warning
            level(
                "leader.stepped_down",
                scheduler_id=self.token,
                leader_epoch=self._epoch,
                reason=reason,
            )


def _script(client: redis.Redis, name: str) -> redis.commands.core.Script:
    source = resources.files("jobledger.runtime").joinpath(f"lua/{name}.lua")
    return client.register_script(source.read_text(encoding="utf-8"))


def current_leader(client: redis.Redis, keys: Keys) -> tuple[str | None, int]:
    """(the token of the scheduler that holds the lock, or None; the latest epoch)."""
    token, epoch = client.mget([keys.leader, keys.leader_epoch])
    if isinstance(token, bytes):
        token = token.decode()
    return (token or None, int(epoch or 0))
