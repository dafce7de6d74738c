"""The budgets' rules, without a store: the GCRA's spends and refusals, which verdict
speaks for several budgets, and what a client address counts as. What every store of
budgets answers alike is the port's suite (``integration/ports/test_budgets.py``)."""

from hypothesis import given
from hypothesis import strategies as st

from jobledger.infra.budgets import Allowance, Verdict, spend, tightest
from jobledger.infra.credentials import address_bucket

SECOND = 1_000_000


@given(
    limit=st.integers(1, 50),
    window_s=st.integers(1, 60),
    spends=st.lists(st.tuples(st.integers(0, 3 * SECOND), st.integers(1, 10)), max_size=60),
)
def test_what_a_budget_admits_never_exceeds_its_limit_plus_its_refill(
    limit: int, window_s: int, spends: list[tuple[int, int]]
) -> None:
    """If spends of any cost arrive at any times, then what is admitted up to any moment
    is at most the limit plus what refilled since the first spend; a refused spend
    passes after its Retry-After (when it fits the budget at all), and a refusal
    spends nothing."""
    allowance = Allowance(limit, window_s * SECOND)
    tat, now, first, admitted = 0, 10 * SECOND, None, 0
    for delay, cost in spends:
        now += delay
        after, verdict = spend(tat, now, cost, allowance)
        if after is None:
            assert not verdict.allowed
            if cost <= limit:
                retried, _ = spend(tat, now + verdict.retry_after_us, cost, allowance)
                assert retried is not None
            continue
        first = now if first is None else first
        tat, admitted = after, admitted + cost
        refill = (now - first) * limit // allowance.window_us
        assert admitted <= limit + refill + 1
        assert 0 <= verdict.remaining <= limit - cost


def test_the_tightest_verdict_speaks_for_several() -> None:
    """If two budgets answer, then a refusal waiting longest wins over a pass and a
    shorter refusal; among passes, the one with the least left."""
    ok = Verdict(allowed=True, limit=10, remaining=5, reset_us=1)
    low = Verdict(allowed=True, limit=3, remaining=1, reset_us=1)
    short = Verdict(allowed=False, limit=3, remaining=0, reset_us=1, retry_after_us=5)
    long = Verdict(allowed=False, limit=3, remaining=0, reset_us=1, retry_after_us=9)
    assert tightest([ok, low]) == low
    assert tightest([ok, short, long]).refused == 2
    assert tightest([long, short]).refused == 0


def test_a_client_address_counts_an_ipv6_slash_64_as_one() -> None:
    """If addresses of one IPv6 /64 are counted, then they are one; an IPv4-mapped
    address counts as its IPv4 address; anything else is kept as it is."""
    assert address_bucket("2001:db8:1:2::1") == address_bucket("2001:db8:1:2:ffff::9")
    assert address_bucket("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert address_bucket("2001:db8:1:3::1") != address_bucket("2001:db8:1:2::1")
    assert address_bucket("::ffff:192.0.2.1") == "192.0.2.1"
    assert address_bucket("192.0.2.1") == "192.0.2.1"
    assert address_bucket("unknown") == "unknown"
