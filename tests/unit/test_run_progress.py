"""Progress reports of a running attempt: what an execution accepts, and when a report
is shown live or recorded in the log."""

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import InvalidDefinitionError, StaleLeaseError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.progress import Progress, ProgressPolicy

T0 = datetime(2026, 10, 25, 1, 59, 58, tzinfo=ZoneInfo("Europe/Berlin"))


def running() -> tuple[Execution, uuid.UUID]:
    execution = Execution.enqueue(
        spec=ExecutionSpec(handler="test.echo"), ready_at=T0, trigger=Trigger.ADHOC, trigger_key="k"
    )
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w", lease_id=lease_id, lease_expires_at=T0 + timedelta(minutes=1))
    return execution, lease_id


def test_a_report_under_the_current_lease_is_recorded_and_a_new_lease_clears_it() -> None:
    """If the running attempt reports progress, then the execution records it as an
    ExecutionProgressed event; a later attempt starts with no progress."""
    execution, lease_id = running()
    report = Progress(percent=40.0, message="loading", data={"rows": 4000})
    execution.report_progress(lease_id=lease_id, progress=report)
    assert execution.progress == report
    assert isinstance(execution.collect_events()[-1], Execution.Progressed)
    execution.fail(lease_id=lease_id, error="boom", at=T0)
    execution.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=T0)
    assert execution.progress is None


def test_a_report_under_a_stale_lease_or_after_the_end_is_refused() -> None:
    """If a report names a lease that is not the current one, or comes after the run
    completed, then it is refused as stale and nothing is recorded."""
    execution, lease_id = running()
    with pytest.raises(StaleLeaseError):
        execution.report_progress(lease_id=uuid.uuid4(), progress=Progress(percent=1))
    execution.complete(lease_id=lease_id, duration=timedelta(seconds=1), result={})
    execution.collect_events()
    with pytest.raises(StaleLeaseError):
        execution.report_progress(lease_id=lease_id, progress=Progress(percent=1))
    assert execution.collect_events() == []


@pytest.mark.parametrize(
    ("report", "field"),
    [
        ({"percent": -1}, "percent"),
        ({"percent": 100.5}, "percent"),
        ({"percent": float("nan")}, "percent"),
        ({"percent": True}, "percent"),
        ({"message": "a\x00b"}, "message"),
        ({"message": "x" * 501}, "message"),
        ({"data": {"n": 2**70}}, "data.n"),
        ({"data": {"blob": "x" * 5000}}, "data"),
        ({"data": ["not", "an", "object"]}, "data"),
    ],
)
def test_a_report_the_stores_cannot_carry_is_refused_naming_it(
    report: dict[str, Any], field: str
) -> None:
    """If a report's percent, message or data cannot be stored or read, then it is
    refused naming the field and the fix, and the execution records nothing."""
    execution, lease_id = running()
    execution.collect_events()
    with pytest.raises(InvalidDefinitionError) as refused:
        execution.report_progress(lease_id=lease_id, progress=Progress(**report))
    assert refused.value.field == field
    assert refused.value.fix
    assert execution.collect_events() == []


POLICY = ProgressPolicy(live_every=timedelta(seconds=1), log_every=timedelta(seconds=10))


@pytest.mark.parametrize(
    ("last_message", "last_at", "message", "at", "recorded"),
    [
        (None, None, "loading", T0, True),  # the first report
        ("loading", T0, "loading", T0 + timedelta(seconds=9), False),
        ("loading", T0, "loading", T0 + timedelta(seconds=10), True),
        ("loading", T0, "writing", T0 + timedelta(milliseconds=1), True),  # a new message
        # Elapsed time, not wall-clock time: the night the clocks go back in Berlin.
        ("loading", T0, "loading", T0.astimezone(UTC) + timedelta(seconds=5), False),
    ],
)
def test_a_report_is_recorded_first_on_a_new_message_and_then_every_interval(
    last_message: str | None,
    last_at: datetime | None,
    message: str,
    at: datetime,
    recorded: bool,
) -> None:
    """If a report comes, then the log records it when it is the first, when its
    message changed, or when the interval has passed since the last one recorded."""
    last = None if last_message is None else Progress(message=last_message)
    assert POLICY.record(Progress(message=message), last, last_at, at) is recorded


@given(st.lists(st.floats(min_value=0, max_value=30), min_size=1, max_size=60))
def test_live_views_are_shown_at_most_once_a_second(offsets: list[float]) -> None:
    """If reports come at any times, then the ones shown live are at least a second
    apart, and the first is always shown."""
    shown: list[datetime] = []
    for at in sorted(T0 + timedelta(seconds=o) for o in offsets):
        if POLICY.show_live(shown[-1] if shown else None, at):
            shown.append(at)
    assert shown[0] == T0 + timedelta(seconds=min(offsets))
    assert all(b - a >= timedelta(seconds=1) for a, b in itertools.pairwise(shown))
