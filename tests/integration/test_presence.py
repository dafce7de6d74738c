"""Worker presence in Redis: what another process wrote there is read one report at a
time, so one that cannot be read never hides the others; and which queues workers
serve, and since when none has, in Redis and in memory."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
from structlog.testing import capture_logs

from jobledger.adapters.memory.presence import MemoryPresence
from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.presence import RedisPresence
from jobledger.infra.presence import Presence, WorkerInfo
from jobledger.schemas.rows import ProgressRow
from jobledger.services.attendance import Attendance

AT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)
DEEP = b'{"worker_id": "w", "queues": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
UNREADABLE = [DEEP, b'{"slots": 1' + b"0" * 5000 + b"}", b"\xff\xfe not json"]


@pytest.mark.parametrize("blob", UNREADABLE, ids=["nested-100000-deep", "huge-number", "bad-utf8"])
def test_a_report_no_decoder_reads_is_left_out_and_the_others_listed(
    redis_client: redis.Redis, blob: bytes
) -> None:
    """If the workers' hash holds a report nested 100,000 levels deep, with a huge
    number or not UTF-8 (another release, a damaged value) beside a live worker's,
    then the live worker is listed, the other is left out with a log line naming it,
    and a run's progress value of that kind reads as no progress."""
    keys = Keys(f"p{uuid.uuid4().hex[:8]}")
    presence = RedisPresence(redis_client, keys)
    info = WorkerInfo(worker_id="w1", queues=("default",), slots=4, running=(), last_heartbeat=AT)
    presence.report(info)
    redis_client.hset(keys.workers, "w0", blob)
    redis_client.zadd(keys.workers_seen, {"w0": AT.timestamp()})
    with capture_logs() as logs:
        assert presence.live(now=AT, stale_after=timedelta(seconds=30)) == [info]
    assert [e["worker_id"] for e in logs if e["event"] == "presence.unreadable_worker"] == ["w0"]
    run = uuid.uuid4()
    shown = ProgressRow(percent=50.0, message="half", data={}, at=AT)
    presence.show_progress(run, shown, timedelta(seconds=30))
    assert presence.progress_of(run, now=AT) == shown
    redis_client.set(keys.progress(run), blob)
    assert presence.progress_of(run, now=AT) is None


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_queue_whose_workers_left_says_since_when_none_served_it(
    redis_client: redis.Redis, kind: str
) -> None:
    """If the only worker of a queue reported last at AT and then left, then the queue
    is served while it is live and, after, unserved since AT; a queue no worker ever
    listed is unserved with no time; a worker whose clock lags moves no time back."""
    presence: Presence = (
        MemoryPresence()
        if kind == "memory"
        else RedisPresence(redis_client, Keys(f"p{uuid.uuid4().hex[:8]}"))
    )
    attendance = Attendance(presence, timedelta(seconds=30))
    beat = WorkerInfo(worker_id="w1", queues=("mail",), slots=1, running=(), last_heartbeat=AT)
    presence.report(beat)
    presence.report(
        WorkerInfo(worker_id="w2", queues=("mail",), slots=1, running=(), last_heartbeat=AT - DAY)
    )
    now = attendance.services(at=AT)["mail"]
    assert (now.workers, now.unserved_since) == (1, None)
    presence.leave("w1")
    later = attendance.services(at=AT + DAY)
    assert (later["mail"].workers, later["mail"].unserved_since) == (0, AT)
    assert "other" not in later
    assert attendance.warnings(["mail", "other", "mail"], at=AT + DAY) == [
        attendance.warnings(["mail"], at=AT + DAY)[0],
        attendance.warnings(["other"], at=AT + DAY)[0],
    ]
    assert "last served 2026-12-07T09:00:00+00:00" in attendance.warnings(["mail"], at=AT + DAY)[0]
