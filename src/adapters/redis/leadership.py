"""Leader election in Redis: one scheduler acts; the others stand by and take over fast.

The lock is a Redis key set with NX and a ttl, holding a random token; the leader
renews it every ttl/3 with a compare-and-set script and releases it with a
compare-and-delete. Each new leader then takes the next epoch from a counter in the
event store's database (``StoredEpochs``), never from Redis: Redis may lose its data
and a counter kept there would start over, while epochs in the log must only grow.
The epoch goes into every ``JobFired``. A leader that finds a later epoch taken steps
down at its next tick: another scheduler was elected (after Redis lost the lock).

The lock alone cannot stop a leader that was paused past its ttl, so the leader also
keeps a deadline on its own monotonic clock (the start of its last successful renewal
plus the ttl) and stops acting once that passes. What really prevents a double fire is
the log (deterministic execution ids and the Job's expected version): see ADR 9.
"""

import secrets
import time
from dataclasses import dataclass

import redis
import structlog

from jobledger.adapters.redis.client import RedisClient, script
from jobledger.adapters.redis.keys import Keys
from jobledger.domain.clock import MonotonicClock
from jobledger.infra.leadership import ELECTION, EpochSource
from jobledger.infra.outages import REDIS, DependencyHealth

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LeaderTiming:
    """Failover takes at most ``ttl + poll`` after the leader dies (defaults: 3.5 s)."""

    ttl: float = 3.0
    renew_every: float = 1.0  # ttl/3: two renewals may fail before the lock lapses
    poll: float = 0.5  # how often a standby tries to take the lock


class RedisLeadership:
    """Leader election on one Redis key, epochs from the store; see the module docstring."""

    def __init__(
        self,
        client: RedisClient,
        keys: Keys,
        epochs: EpochSource,
        *,
        timing: LeaderTiming = LeaderTiming(),
        clock: MonotonicClock = time.monotonic,
        name: str = "scheduler",
        health: DependencyHealth | None = None,
    ) -> None:
        self._client = client
        self._health = health or DependencyHealth("scheduler")
        self._keys = keys
        self._epochs = epochs
        self._timing = timing
        self._clock = clock
        self.token = f"{name}-{secrets.token_hex(8)}"
        self._epoch = 0
        self._leading = False
        self._deadline = 0.0
        self._next_attempt = 0.0
        self.changes = 0  # leadership gained or lost: a metric
        self._acquire = script(client, "leader_acquire")
        self._publish = script(client, "leader_publish")
        self._renew = script(client, "leader_renew")
        self._release = script(client, "leader_release")

    @property
    def epoch(self) -> int:
        return self._epoch

    def is_leader(self) -> bool:
        return self._leading and self._clock() < self._deadline

    def tick(self) -> None:
        now = self._clock()
        if self._leading and now >= self._deadline:
            self._step_down("deadline passed without a renewal")
            # The lock may still hold our token (a renewal that hung, then failed): the
            # next election, ours or another's, must not wait out a lock nobody uses.
            self._hand_back()
        if self._leading and self._superseded():
            self._step_down("a later epoch was taken by another scheduler")
            self._next_attempt = now  # stand by at once: the lock is free or the other's
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
            if self._health.report(error, self._health.clock(), loop=ELECTION) is None:
                log.warning("leader.redis_error", scheduler_id=self.token, error=str(error))
            self._next_attempt = now + self._timing.poll
        else:
            # Its own loop: the scheduler's thread also recovers leases, in slots of a
            # cluster that may be down while the lock's slot answers.
            self._health.succeeded(REDIS, self._health.clock(), loop=ELECTION)

    def release(self) -> None:
        if self._leading:
            self._hand_back()
            self._step_down("released")

    def _hand_back(self) -> None:
        """Delete the lock if it still holds our token; if Redis cannot be reached, the
        lock lapses by its ttl instead."""
        try:
            self._release(keys=[self._keys.leader], args=[self.token])
        except redis.RedisError as error:
            self._health.report(error, self._health.clock(), loop=ELECTION)

    def _superseded(self) -> bool:
        """Whether a later leader took an epoch: Redis lost our lock and another
        scheduler won it. Checked every tick, so both act for one tick at most."""
        try:
            return self._epochs.latest_epoch() > self._epoch
        except Exception:  # noqa: BLE001 (an unreachable store is not a later leader; the deadline still holds)
            return False

    def _try_acquire(self, started: float) -> None:
        ttl_ms = int(self._timing.ttl * 1000)
        keys = [self._keys.leader, self._keys.leader_epoch]
        seen = int(self._acquire(keys=keys, args=[self.token, ttl_ms]))
        if seen < 0:
            self._next_attempt = started + self._timing.poll
            return
        epoch = self._take_epoch(seen)
        if epoch is None or not self._announce(epoch):
            self._next_attempt = started + self._timing.poll
            return
        if self._clock() >= started + self._timing.renew_every:
            # A win that took longer than a renewal round (a store that hung and came
            # back): the deadline, counted from before the calls, may pass before the
            # first renewal lands, and the leader would be elected and step down at
            # once. Give the lock back and try again at once, counted from then.
            self._hand_back()
            log.info("leader.late_win_returned", scheduler_id=self.token, leader_epoch=epoch)
            return
        self._leading, self._epoch = True, epoch
        self._deadline = started + self._timing.ttl
        self._next_attempt = started + self._timing.renew_every
        self.changes += 1
        log.info("leader.elected", scheduler_id=self.token, leader_epoch=epoch)

    def _take_epoch(self, seen: int) -> int | None:
        """The next epoch from the store, above ``seen`` (the latest Redis knows of: a
        scheduler of an older release counted there); without one, hand the lock back:
        a leader must never fire under an epoch that could repeat."""
        try:
            return self._epochs.next_epoch(seen)
        except Exception as error:  # noqa: BLE001 (whatever the store says, do not lead)
            self._release(keys=[self._keys.leader], args=[self.token])
            # An unreachable store is an outage, said once by the tracker; anything
            # else is worth a line each time.
            if self._health.report(error, self._health.clock()) is None:
                log.warning("leader.epoch_unavailable", scheduler_id=self.token, error=str(error))
            return None

    def _announce(self, epoch: int) -> bool:
        """Show the epoch beside the lock (for status pages) if the lock is still ours."""
        return bool(
            int(
                self._publish(
                    keys=[self._keys.leader, self._keys.leader_epoch], args=[self.token, epoch]
                )
            )
        )

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


def current_leader(client: RedisClient, keys: Keys) -> tuple[str | None, int]:
    """(the token of the scheduler that holds the lock, or None; the epoch its leader
    announced, 0 if none since Redis last lost its data)."""
    token, epoch = client.mget([keys.leader, keys.leader_epoch])
    if isinstance(token, bytes):
        token = token.decode()
    return (token or None, int(epoch or 0))
