"""The range of instants: one check for every way in, and a run outside it is never
made, whichever path makes it."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.instants import (
    EARLIEST,
    EARLIEST_MS,
    LATEST,
    LATEST_MS,
    check_instant,
    holds_ms,
)
from jobledger.projections.times import to_ms

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Within a day of either end, to the microsecond.
_NEAR = st.integers(min_value=-86_400_000_000, max_value=86_400_000_000)
_OFFSETS = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


def _shifted(end: datetime, micros: int) -> datetime | None:
    """``end`` moved by ``micros``, or None where no datetime holds that instant."""
    try:
        return end + timedelta(microseconds=micros)
    except OverflowError:
        return None


@given(end=st.sampled_from([EARLIEST, LATEST]), micros=_NEAR, zone=_OFFSETS)
def test_an_instant_is_taken_exactly_when_it_lies_in_the_range(
    end: datetime, micros: int, zone: timezone
) -> None:
    """If an instant near either end of the range is written in any offset from -14:00
    to +14:00, then check_instant takes it (as the same instant, in UTC) exactly when
    it lies from EARLIEST to LATEST, else refuses it naming the field; and the stored
    milliseconds of a taken one are in the range the readers accept."""
    instant = _shifted(end, micros)
    if instant is None:
        return
    try:
        written = instant.astimezone(zone)
    except OverflowError:
        return  # no datetime can carry it in that offset, so no body can either
    if EARLIEST <= instant <= LATEST:
        assert check_instant("run_at", written) == instant
        assert holds_ms(to_ms(instant))
    else:
        with pytest.raises(InvalidDefinitionError) as refused:
            check_instant("run_at", written)
        assert refused.value.field == "run_at"


def test_the_stored_range_is_the_instants_range() -> None:
    """If the readers check stored milliseconds, then their range is the instants'
    own: the ends are held, a millisecond beyond is not."""
    assert (to_ms(EARLIEST), to_ms(LATEST)) == (EARLIEST_MS, LATEST_MS)
    assert holds_ms(EARLIEST_MS)
    assert holds_ms(LATEST_MS)
    assert not holds_ms(EARLIEST_MS - 1)
    assert not holds_ms(LATEST_MS + 1)


@pytest.mark.parametrize(
    "ready_at",
    [
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-14))),
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
    ],
)
def test_no_run_is_made_outside_the_range(ready_at: datetime) -> None:
    """If any path asks for a run due outside the range (one run, or a batch's event
    alone), then the domain refuses it naming ready_at, so no such run reaches the log."""
    spec = ExecutionSpec(handler="test.echo")
    with pytest.raises(InvalidDefinitionError, match="ready_at"):
        Execution.enqueue(spec=spec, ready_at=ready_at, trigger=Trigger.ADHOC, trigger_key="k")
    with pytest.raises(InvalidDefinitionError, match="ready_at"):
        Execution.enqueued(spec=spec, ready_at=ready_at, trigger=Trigger.ADHOC, trigger_key="k")
