"""What a run's way in checks beside the run (which workers serve its queue, the cap on
queues): advice and bounds that never stand in the way of the log while Redis is down."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from jobledger.adapters.memory.presence import MemoryPresence
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.infra.presence import WorkerInfo
from jobledger.services.attendance import SERVED_KEPT_FOR, Attendance
from jobledger.services.caps import QueueRoom

AT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("error", [redis.ConnectionError, redis.TimeoutError])
def test_no_warning_while_the_workers_reports_cannot_be_read(
    error: type[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the workers' reports cannot be read (Redis refuses or times out), then a run
    to any queue gets no warning rather than an error, and the log says why once."""
    presence = MemoryPresence()

    def refuse(**_: object) -> list[object]:
        raise error("down")

    monkeypatch.setattr(presence, "live", refuse)
    attendance = Attendance(presence, stale_after=timedelta(seconds=30))
    with capture_logs() as logs:
        assert attendance.warnings(["default", "reports"], at=AT) == []
    assert [entry["event"] for entry in logs] == ["queue.attendance_unknown"]


def test_a_queue_no_worker_serves_is_named_once() -> None:
    """If no worker ever reported a queue, then runs to it get one warning naming it and
    the setting that makes a worker serve it."""
    attendance = Attendance(MemoryPresence(), stale_after=timedelta(seconds=30))
    (warning,) = attendance.warnings(["reports", "reports"], at=AT)
    assert "reports" in warning
    assert "JOBLEDGER_WORKER_QUEUES" in warning


def test_a_run_to_a_served_queue_reads_no_last_served_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If a live worker serves every queue of the runs, then there is no warning and the
    times queues were last served are not read (an enqueue's common case costs one read
    of the workers); a run to an unserved queue still reads them, for its warning."""
    presence = MemoryPresence()
    presence.report(
        WorkerInfo(worker_id="w1", queues=("default",), slots=4, running=(), last_heartbeat=AT)
    )
    reads: list[int] = []
    last_served = presence.last_served

    def counted() -> dict[str, datetime]:
        reads.append(1)
        return last_served()

    monkeypatch.setattr(presence, "last_served", counted)
    attendance = Attendance(presence, stale_after=timedelta(seconds=30))
    assert attendance.warnings(["default", "default"], at=AT) == []
    assert reads == []
    (warning,) = attendance.warnings(["default", "reports"], at=AT)
    assert "'reports'" in warning
    assert reads == [1]


@pytest.mark.parametrize(
    ("later", "queues", "reads"),
    [
        (timedelta(0), ["default"], 1),  # the same moment: the read answers
        (timedelta(milliseconds=999), ["default"], 1),  # within the second
        (SERVED_KEPT_FOR, ["default"], 2),  # a second on: read again
        (-timedelta(milliseconds=1), ["default"], 2),  # a clock gone back: read again
        (timedelta(milliseconds=10), ["reports"], 2),  # a queue not served then: read
    ],
)
def test_a_read_of_the_served_queues_answers_for_a_second(
    later: timedelta, queues: list[str], reads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a run to a served queue follows another within SERVED_KEPT_FOR, then the
    workers' reports are not read again; a later run, or one to a queue that was not
    served at the last read (a worker may have started since), reads them."""
    presence = MemoryPresence()
    presence.report(
        WorkerInfo(worker_id="w1", queues=("default",), slots=4, running=(), last_heartbeat=AT)
    )
    read: list[int] = []
    live = presence.live

    def counted(**kwargs: Any) -> list[WorkerInfo]:
        read.append(1)
        return live(**kwargs)

    monkeypatch.setattr(presence, "live", counted)
    attendance = Attendance(presence, stale_after=timedelta(seconds=30))
    assert attendance.warnings(["default"], at=AT) == []
    attendance.warnings(queues, at=AT + later)
    assert len(read) == reads


def test_the_queue_cap_lets_a_run_through_while_the_queues_cannot_be_read() -> None:
    """If the queues the projection holds cannot be read (Redis down), then a run to a
    queue not seen before is let through (the log takes it, as every run then), and the
    cap applies again once they can be read."""
    reachable = False

    def known() -> frozenset[str]:
        if not reachable:
            raise redis.ConnectionError("Connection refused")
        return frozenset({"default"})

    room = QueueRoom(known, most=1)
    with capture_logs() as logs:
        room.check("reports")
    assert [entry["event"] for entry in logs] == ["queue.cap_unchecked"]
    reachable = True
    with pytest.raises(InvalidDefinitionError, match="cap of 1"):
        room.check("reports")
