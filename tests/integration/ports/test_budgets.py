"""The budgets port's contract (``infra.budgets.Budgets``), run on every backend: process
memory (one API process), one Redis server and a Redis Cluster (shared by API
processes). Each spends, refuses and holds as ``infra.budgets.spend`` and ``tightest``
say: the Redis backend in Lua, the memory one in Python."""

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.ports.backends import MEMORY_AND_REDIS, redis_under_a_prefix

from jobledger.adapters.memory.budgets import MemoryBudgets
from jobledger.adapters.redis.budgets import RedisBudgets
from jobledger.infra.budgets import Allowance, Ask, Budgets, Verdict, spend, tightest

SECOND = 1_000_000
T0 = 1_800_000_000 * SECOND  # microseconds since the epoch
T0_MS = T0 // 1000


@pytest.fixture(params=MEMORY_AND_REDIS)
def budgets(request: pytest.FixtureRequest) -> Budgets:
    if request.param == "memory":
        return MemoryBudgets()
    return RedisBudgets(*redis_under_a_prefix(request))


def unique(name: str) -> str:
    """A budget's name of its own: hypothesis runs many examples on one store."""
    return f"{name}:{uuid.uuid4().hex[:8]}"


# ---- rate budgets ------------------------------------------------------------------------


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


def test_a_full_budget_answers_its_limit_what_is_left_and_when_it_is_whole(
    budgets: Budgets,
) -> None:
    """If 3 requests of a 3-per-second budget are spent at once, then what is left counts
    down to 0, the fourth is refused for a third of a second, and the budget is whole a
    second after the first."""
    ask = [Ask("req:c:x", Allowance(3, SECOND))]
    verdicts = [budgets.take(ask, 1, now_us=T0) for _ in range(4)]
    assert [v.remaining for v in verdicts[:3]] == [2, 1, 0]
    interval = SECOND // 3  # whole microseconds: a budget is at most a few off
    assert verdicts[2].reset_us == 3 * interval
    assert not verdicts[3].allowed
    assert verdicts[3].retry_after_us == 4 * interval - SECOND
    assert budgets.take(ask, 1, now_us=T0 + verdicts[3].retry_after_us).allowed


def test_several_budgets_are_spent_all_or_none(budgets: Budgets) -> None:
    """If an address's budget is spent and a credential's is not, then a request of both
    is refused naming the address (index 0) and leaves the credential's budget whole."""
    address = Ask("req:a:1", Allowance(1, SECOND))
    credential = Ask("req:c:x", Allowance(5, SECOND))
    assert budgets.take([address], 1, now_us=T0).allowed
    refused = budgets.take([address, credential], 1, now_us=T0)
    assert (refused.allowed, refused.refused) == (False, 0)
    assert budgets.take([credential], 1, now_us=T0).remaining == 4


@dataclass
class RateModel:
    """The rule alone: each budget's TAT, spent by ``spend``, answered by ``tightest``."""

    tats: dict[str, int] = field(default_factory=dict)

    def take(self, asks: list[Ask], cost: int, now_us: int) -> Verdict:
        results = [spend(self.tats.get(a.name, 0), now_us, cost, a.allowance) for a in asks]
        verdict = tightest([v for _, v in results])
        if verdict.allowed:
            for ask, (tat, _) in zip(asks, results, strict=True):
                self.tats[ask.name] = tat or 0
        return verdict


# Windows of 10 s or more: a Redis budget expires on the server's clock once whole
# again, and a window that short could pass in real time during an example.
allowances = st.builds(
    Allowance, limit=st.integers(1, 10), window_us=st.integers(10, 60).map(lambda s: s * SECOND)
)
spends = st.lists(
    st.tuples(
        st.lists(st.integers(0, 2), min_size=1, max_size=3),  # which budgets, in order
        st.integers(1, 12),  # cost
        st.integers(0, 20 * SECOND),  # time since the spend before
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(allowed=st.lists(allowances, min_size=3, max_size=3), history=spends)
def test_every_spend_is_answered_as_the_rule_answers_it(
    budgets: Budgets, allowed: list[Allowance], history: list[tuple[list[int], int, int]]
) -> None:
    """If spends of any cost from any of three budgets (one, several, one twice) come at
    any times, then each verdict is the rule's, field for field: allowed or which
    budget refused, the limit, what is left, the reset and the wait."""
    names = [unique(n) for n in "abc"]
    model, now = RateModel(), T0
    for which, cost, delay in history:
        now += delay
        asks = [Ask(names[i], allowed[i]) for i in which]
        assert budgets.take(asks, cost, now_us=now) == model.take(asks, cost, now)


# ---- holds ---------------------------------------------------------------------------------


def test_holds_up_to_the_cap_until_released_or_expired(budgets: Budgets) -> None:
    """If a credential holds 2 of 2 long-polls, then a third is refused until the first
    ends, and a hold whose deadline passed frees its place by itself."""
    now = T0_MS
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


def test_a_release_frees_its_own_hold_only(budgets: Budgets) -> None:
    """If a ticket is released twice, or a ticket never handed out (or of another name)
    is released, then the other holds stay open and the cap still counts them."""
    first, _ = budgets.hold("polls:c:x", 2, until_ms=T0_MS + 5000, now_ms=T0_MS)
    second, _ = budgets.hold("polls:c:x", 2, until_ms=T0_MS + 7000, now_ms=T0_MS)
    assert first
    assert second
    budgets.release("polls:c:x", "not-a-ticket")
    budgets.release("polls:c:other", first)
    assert budgets.hold("polls:c:x", 2, until_ms=T0_MS + 1000, now_ms=T0_MS) == (None, 5000)
    budgets.release("polls:c:x", first)
    budgets.release("polls:c:x", first)
    third, _ = budgets.hold("polls:c:x", 2, until_ms=T0_MS + 1000, now_ms=T0_MS)
    assert third
    assert budgets.hold("polls:c:x", 2, until_ms=T0_MS + 1000, now_ms=T0_MS) == (None, 1000)


@dataclass
class HoldModel:
    """The rule alone: the open holds' deadlines; one past its deadline is closed."""

    open: dict[str, int] = field(default_factory=dict)

    def hold(self, ticket: str | None, cap: int, until_ms: int, now_ms: int) -> int:
        """The wait answered (0: held, under ``ticket``)."""
        self.open = {t: end for t, end in self.open.items() if end > now_ms}
        if len(self.open) >= cap:
            return max(1, min(self.open.values()) - now_ms)
        assert ticket is not None
        self.open[ticket] = until_ms
        return 0


holds = st.lists(
    st.tuples(
        st.sampled_from(["hold", "release"]),
        st.integers(1_000, 30_000),  # how long a hold lasts
        st.integers(0, 10_000),  # time since the step before
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cap=st.integers(1, 4), history=holds)
def test_every_hold_is_answered_as_the_rule_answers_it(
    budgets: Budgets, cap: int, history: list[tuple[str, int, int]]
) -> None:
    """If holds of any length are asked for and released (the oldest ticket) at any
    times, then each is held or refused as the rule says, a refusal naming the time
    until the first open hold ends."""
    name, model, now, tickets = unique("polls"), HoldModel(), T0_MS, list[str]()
    for step, lasts, delay in history:
        now += delay
        if step == "release" and tickets:
            oldest = tickets.pop(0)
            budgets.release(name, oldest)
            model.open.pop(oldest, None)
            continue
        ticket, wait = budgets.hold(name, cap, until_ms=now + lasts, now_ms=now)
        assert wait == model.hold(ticket, cap, now + lasts, now)
        assert (ticket is None) == (wait > 0)
        if ticket is not None:
            tickets.append(ticket)
