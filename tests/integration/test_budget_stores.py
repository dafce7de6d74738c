"""The budget stores alike: Redis (shared by API processes) and memory (one process)
spend, refuse and hold the same way."""

import uuid
from collections.abc import Iterator

import pytest

from jobledger.adapters.memory.budgets import MemoryBudgets
from jobledger.adapters.redis.budgets import RedisBudgets
from jobledger.adapters.redis.client import connect
from jobledger.adapters.redis.keys import Keys
from jobledger.infra.budgets import Allowance, Ask, Budgets

SECOND = 1_000_000
T0 = 1_800_000_000 * SECOND  # microseconds since the epoch


@pytest.fixture(params=["memory", "redis"])
def budgets(request: pytest.FixtureRequest) -> Iterator[Budgets]:
    if request.param == "memory":
        yield MemoryBudgets()
        return
    url: str = request.getfixturevalue("redis_server")
    client = connect(url)
    yield RedisBudgets(client, Keys(f"b{uuid.uuid4().hex[:8]}"))
    client.close()


def test_spends_refusals_and_their_waits(budgets: Budgets) -> None:
    """If 3 of a 3-per-second budget are spent, then what is left counts down, a fourth
    is refused for a third of a second, two budgets are spent all or none, and a spend
    of 2 passes once two thirds refilled."""
    credential = Ask("req:c:x", Allowance(3, SECOND))
    address = Ask("req:a:y", Allowance(10, SECOND))
    verdicts = [budgets.take([address, credential], 1, now_us=T0) for _ in range(3)]
    assert [v.remaining for v in verdicts] == [2, 1, 0]
    assert verdicts[-1].limit == 3
    refused = budgets.take([address, credential], 1, now_us=T0)
    wait = 4 * (SECOND // 3) - SECOND  # the fourth interval, past the window
    assert (refused.allowed, refused.refused, refused.retry_after_us) == (False, 1, wait)
    assert budgets.take([address], 1, now_us=T0).remaining == 6  # the refusal spent none
    assert not budgets.take([credential], 2, now_us=T0 + SECOND // 3).allowed
    assert budgets.take([credential], 2, now_us=T0 + 2 * (SECOND // 3)).allowed


def test_holds_up_to_the_cap_until_released_or_expired(budgets: Budgets) -> None:
    """If a credential holds 2 of 2 long-polls, then a third is refused until the first
    ends, and a hold whose deadline passed frees its place by itself."""
    now = T0 // 1000
    first, _ = budgets.hold("polls:c:x", 2, until_ms=now + 1000, now_ms=now)
    second, _ = budgets.hold("polls:c:x", 2, until_ms=now + 5000, now_ms=now)
    assert first
    assert second
    assert budgets.hold("polls:c:x", 2, until_ms=now + 1000, now_ms=now) == (None, 1000)
    budgets.release("polls:c:x", first)
    third, _ = budgets.hold("polls:c:x", 2, until_ms=now + 1000, now_ms=now)
    assert third
    assert budgets.hold("polls:c:x", 2, until_ms=now + 9000, now_ms=now)[0] is None
    assert budgets.hold("polls:c:x", 2, until_ms=now + 9000, now_ms=now + 1000)[0]
    assert budgets.hold("polls:c:other", 2, until_ms=now + 1000, now_ms=now)[0]
