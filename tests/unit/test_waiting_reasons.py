"""Why a pending run waits, from its row and the moment (fakes for the queue and the
workers' presence: the integration test runs the real ones)."""

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobledger.domain.queue import Queue
from jobledger.infra.presence import WorkerInfo
from jobledger.schemas.rows import ExecutionRow
from jobledger.services.waiting import READY, WaitingReasons

NOW = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)  # Europe/Berlin jumps an hour at 02:00 local
BERLIN = ZoneInfo("Europe/Berlin")


def row(status: str = "pending", **changes: object) -> ExecutionRow:
    values: dict[str, object] = {
        "id": uuid.uuid4(), "job_id": None, "job_name": None, "handler": "h", "queue": "q",
        "priority": 0, "trigger": "adhoc", "status": status, "attempt": 1, "max_attempts": 4,
        "scheduled_for": None, "enqueued_at": NOW, "ready_at": NOW, "started_at": None,
        "finished_at": None, "worker_id": None, "last_error": None, "duration_ms": None,
        "lateness_ms": None, "result": None, "closed_by": None, "closed_reason": None,
        "version": 1,
    }  # fmt: skip
    return ExecutionRow(**(values | changes))  # type: ignore[arg-type]


class Presence:
    def __init__(self, queues: tuple[str, ...]) -> None:
        self.queues = queues

    def live(self, *, now: datetime, stale_after: timedelta) -> list[WorkerInfo]:
        del stale_after
        return [
            WorkerInfo(worker_id="w", queues=self.queues, slots=1, running=(), last_heartbeat=now)
        ]


def reasons(
    rows: list[ExecutionRow], *, paused: bool = False, served: tuple[str, ...] = ("q",)
) -> list[str | None]:
    queue = Queue.register("q")
    if paused:
        queue.pause(by="ops", reason="maintenance", at=NOW)
    explain = WaitingReasons(
        lambda _name: queue, Presence(served), stale_after=timedelta(seconds=90), now=lambda: NOW
    )
    return [r.waiting for r in explain.explain(rows)]


BACK_OFF = "back-off after attempt 1 failed"
LIMIT = "waits for its concurrency limit customer-7"
DAY = "2026-03-29"


@pytest.mark.parametrize(
    ("ready_at", "stored", "attempt", "expected"),
    [
        (datetime(2026, 3, 29, 4, 15, tzinfo=BERLIN), None, 1, f"due, until {DAY}T04:15:00+02:00"),
        (NOW + timedelta(minutes=5), BACK_OFF, 2, f"{BACK_OFF}, until {DAY}T01:35:00+00:00"),
        (NOW + timedelta(seconds=30), "deferred: x", 1, f"deferred: x, until {DAY}T01:30:30+00:00"),
        (NOW + timedelta(seconds=1), None, 3, f"due again, until {DAY}T01:30:01+00:00"),
        (datetime(2026, 3, 29, 3, 15, tzinfo=BERLIN), None, 1, READY),  # 01:15 UTC: due
        (NOW, LIMIT, 1, LIMIT),
        (NOW - timedelta(hours=1), BACK_OFF, 2, READY),
        (datetime(2026, 3, 29, 2, 30, tzinfo=BERLIN), None, 1, READY),  # 00:30 UTC: due
    ],
)  # fmt: skip
def test_a_pending_run_says_until_when_and_why(
    ready_at: datetime, stored: str | None, attempt: int, expected: str
) -> None:
    """If a pending run is not due yet, then it says why and until when (in the zone it
    was given); if it is due, then it says what holds it, or that it is ready."""
    assert reasons([row(ready_at=ready_at, waiting=stored, attempt=attempt)]) == [expected]


def test_the_moment_holds_a_due_run_and_others_say_nothing() -> None:
    """If the run's queue is paused, or no live worker serves it, then a due run says so
    (a pause first); a running or finished run says nothing, whatever its row kept."""
    due = row(waiting="waits for its rate limit api")
    assert reasons([due], paused=True) == ["queue q paused by ops"]
    assert reasons([due], served=("other",)) == ["no live worker serves queue q"]
    assert reasons([row("running", waiting="stale"), row("completed")]) == [None, None]
