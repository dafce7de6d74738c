"""Budgets of the API's callers: how many requests, runs and open long-polls each may
have, shared by every API process (Redis), or held by the one process (memory).

A rate budget is a generic cell rate algorithm (GCRA): ``limit`` units per ``window``,
of which all may be spent at once, refilled evenly. Its whole state is one number per
budget, the theoretical arrival time (TAT): the moment the budget would be full again.
Spending ``cost`` units moves the TAT on by ``cost`` intervals (``window / limit``);
it is refused, spending nothing, while the new TAT would lie more than a window ahead.
Several budgets (a credential's and its address's) are spent together or not at all.

A hold budget counts open things (long-polls): each hold is a ticket with a deadline,
so a process that dies holding some frees them when their deadlines pass.

Times are integers: microseconds for rates (an interval of a 300-per-second budget
is not a whole millisecond), milliseconds for holds. ``budget_take.lua`` and
``budget_hold.lua`` do in Redis what ``spend`` and ``MemoryBudgets.hold`` do here.
"""

import dataclasses
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

import redis

from jobledger.projections.redis_client import RedisClient
from jobledger.projections.redis_keys import Keys

US_PER_MS = 1000
# A memory budget map larger than this forgets the budgets that are full again.
_PRUNE_ABOVE = 10_000


@dataclass(frozen=True, slots=True)
class Allowance:
    """``limit`` units per ``window_us``; all of them may be spent at once."""

    limit: int
    window_us: int

    def __post_init__(self) -> None:
        if self.limit < 1 or self.window_us < self.limit:
            raise ValueError(f"a budget needs a limit >= 1 and a window >= it: {self}")

    @property
    def interval_us(self) -> int:
        return self.window_us // self.limit


@dataclass(frozen=True, slots=True)
class Ask:
    """One budget to spend from: its name (a key's tail) and its allowance."""

    name: str
    allowance: Allowance


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The answer to a spend: if refused, which ask (its index) and in how long it
    could pass; either way, the tightest budget's limit, what is left of it and when
    it is whole again (what the RateLimit headers say)."""

    allowed: bool
    limit: int
    remaining: int
    reset_us: int
    retry_after_us: int = 0
    refused: int = -1


def spend(tat: int, now: int, cost: int, allowance: Allowance) -> tuple[int | None, Verdict]:
    """The new TAT (None if refused) and the verdict of spending ``cost`` at ``now``
    from a budget whose TAT is ``tat`` (0 for one never spent)."""
    interval, window = allowance.interval_us, allowance.window_us
    base = max(tat, now)
    after = base + cost * interval
    if after - window > now:
        left = max(0, (window - (base - now)) // interval)
        verdict = Verdict(
            allowed=False,
            limit=allowance.limit,
            remaining=left,
            reset_us=base - now,
            retry_after_us=after - window - now,
        )
        return None, verdict
    left = (window - (after - now)) // interval
    return after, Verdict(allowed=True, limit=allowance.limit, remaining=left, reset_us=after - now)


def tightest(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict for several budgets: the first refusal waiting longest, else the
    budget with the least left."""
    refused = [(v.retry_after_us, -i, i) for i, v in enumerate(verdicts) if not v.allowed]
    if refused:
        index = max(refused)[2]
        return dataclasses.replace(verdicts[index], refused=index)
    return min(verdicts, key=lambda v: (v.remaining, -v.reset_us))


class Budgets(Protocol):
    """Where budgets are kept. ``blocking``: its calls wait on the network, so an event
    loop calls them from a thread."""

    blocking: bool

    def take(self, asks: Sequence[Ask], cost: int, *, now_us: int) -> Verdict:
        """Spend ``cost`` from every ask, or from none if one of them refuses."""
        ...

    def hold(self, name: str, cap: int, *, until_ms: int, now_ms: int) -> tuple[str | None, int]:
        """A ticket for one more open hold under ``name`` until ``until_ms``, or None
        and the milliseconds until the next one is free, if ``cap`` are open."""
        ...

    def release(self, name: str, ticket: str) -> None: ...


class MemoryBudgets:
    """The budgets of one process (``jobledger dev``, embedded, a single API)."""

    blocking = False

    def __init__(self) -> None:
        self._tats: dict[str, int] = {}
        self._holds: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def take(self, asks: Sequence[Ask], cost: int, *, now_us: int) -> Verdict:
        with self._lock:
            results = [spend(self._tats.get(a.name, 0), now_us, cost, a.allowance) for a in asks]
            verdict = tightest([v for _, v in results])
            if verdict.allowed:
                for ask, (tat, _) in zip(asks, results, strict=True):
                    self._tats[ask.name] = tat or 0
            if len(self._tats) > _PRUNE_ABOVE:
                self._tats = {name: tat for name, tat in self._tats.items() if tat > now_us}
        return verdict

    def hold(self, name: str, cap: int, *, until_ms: int, now_ms: int) -> tuple[str | None, int]:
        with self._lock:
            open_ = {t: end for t, end in self._holds.get(name, {}).items() if end > now_ms}
            if len(open_) >= cap:
                self._holds[name] = open_
                return None, max(1, min(open_.values()) - now_ms)
            ticket = uuid.uuid4().hex
            open_[ticket] = until_ms
            self._holds[name] = open_
        return ticket, 0

    def release(self, name: str, ticket: str) -> None:
        with self._lock:
            open_ = self._holds.get(name, {})
            open_.pop(ticket, None)
            if not open_:
                self._holds.pop(name, None)


class RedisBudgets:
    """The budgets every API process shares, in one Redis slot (``{budgets}``), so that
    the budgets of one request are spent in one script call."""

    blocking = True

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._take = _script(client, "budget_take")
        self._hold = _script(client, "budget_hold")

    def take(self, asks: Sequence[Ask], cost: int, *, now_us: int) -> Verdict:
        args: list[int] = [now_us, cost]
        for ask in asks:
            args += [ask.allowance.interval_us, ask.allowance.window_us, ask.allowance.limit]
        keys = [self._keys.budget(ask.name) for ask in asks]
        allowed, limit, left, reset, retry, refused = self._take(keys=keys, args=args)
        return Verdict(
            allowed=bool(allowed),
            limit=limit,
            remaining=left,
            reset_us=reset,
            retry_after_us=retry,
            refused=refused - 1,
        )

    def hold(self, name: str, cap: int, *, until_ms: int, now_ms: int) -> tuple[str | None, int]:
        ticket = uuid.uuid4().hex
        key = self._keys.budget_holds(name)
        taken, wait = self._hold(keys=[key], args=[now_ms, cap, until_ms, ticket])
        return (ticket, 0) if taken else (None, max(1, int(wait)))

    def release(self, name: str, ticket: str) -> None:
        self._client.zrem(self._keys.budget_holds(name), ticket)


def _script(client: RedisClient, name: str) -> redis.commands.core.Script:
    source = resources.files("jobledger.runtime").joinpath(f"lua/{name}.lua")
    return client.register_script(source.read_text(encoding="utf-8"))
