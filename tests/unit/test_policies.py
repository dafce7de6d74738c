"""Retry policy: backoff bounds and validation."""

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.policies import RetryPolicy

policies = st.builds(
    RetryPolicy,
    max_retries=st.integers(0, 100),
    initial_backoff=st.timedeltas(timedelta(milliseconds=1), timedelta(hours=1)),
    max_backoff=st.timedeltas(timedelta(hours=1), timedelta(days=7)),
    jitter=st.booleans(),
)


@given(policy=policies, attempt=st.integers(1, 10_000), rand=st.floats(0, 1))
def test_backoff_is_within_bounds_for_any_attempt(
    policy: RetryPolicy, attempt: int, rand: float
) -> None:
    """If any attempt fails, then its delay is between 0 and min(initial*2^(n-1), max)."""
    delay = policy.backoff(attempt, rand)
    # Exact integer arithmetic, so the oracle cannot overflow where the rule must not.
    initial_us = policy.initial_backoff // timedelta(microseconds=1)
    max_us = policy.max_backoff // timedelta(microseconds=1)
    ceiling = timedelta(microseconds=min(initial_us * 2 ** (attempt - 1), max_us))
    assert timedelta(0) <= delay <= ceiling
    if not policy.jitter:
        assert delay == pytest.approx(ceiling, abs=timedelta(microseconds=1))


@given(policy=policies.filter(lambda p: not p.jitter), attempt=st.integers(1, 60))
def test_backoff_without_jitter_never_shrinks(policy: RetryPolicy, attempt: int) -> None:
    """If jitter is off, then a later attempt never waits less than an earlier one."""
    assert policy.backoff(attempt + 1) >= policy.backoff(attempt)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 1), (2, 2), (3, 4), (4, 8), (6, 30), (1000, 30)],
)
def test_backoff_doubles_up_to_the_cap(attempt: int, expected: float) -> None:
    """If jitter is off, then the delay doubles per attempt and stops at max_backoff."""
    policy = RetryPolicy(
        initial_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=30), jitter=False
    )
    assert policy.backoff(attempt) == timedelta(seconds=expected)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (RetryPolicy(max_retries=-1), "retry.max_retries"),
        (RetryPolicy(max_retries=101), "retry.max_retries"),
        (RetryPolicy(initial_backoff=timedelta(0)), "retry.initial_backoff"),
        (
            RetryPolicy(initial_backoff=timedelta(seconds=10), max_backoff=timedelta(seconds=1)),
            "retry.max_backoff",
        ),
        (RetryPolicy(max_backoff=timedelta(days=30)), "retry.max_backoff"),
    ],
)
def test_bad_retry_policies_name_the_field(policy: RetryPolicy, field: str) -> None:
    """If a retry policy is out of range, then the error names the field and the fix."""
    with pytest.raises(InvalidDefinitionError) as caught:
        policy.check()
    assert caught.value.field == field
    assert "use" in str(caught.value)
