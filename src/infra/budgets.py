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
is not a whole millisecond), milliseconds for holds. The Redis and memory budgets
(``jobledger.adapters``) both follow ``spend``.
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

US_PER_MS = 1000


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
