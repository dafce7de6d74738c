"""The API callers' budgets in Redis, shared by every API process: ``budget_take.lua``
and ``budget_hold.lua`` do what ``platform.budgets.spend`` and ``MemoryBudgets.hold`` do."""

import uuid
from collections.abc import Sequence

from jobledger.adapters.redis.client import RedisClient, script
from jobledger.adapters.redis.keys import Keys
from jobledger.infra.budgets import Ask, Verdict


class RedisBudgets:
    """The budgets every API process shares, in one Redis slot (``{budgets}``), so that
    the budgets of one request are spent in one script call."""

    blocking = True

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._take = script(client, "budget_take")
        self._hold = script(client, "budget_hold")

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
