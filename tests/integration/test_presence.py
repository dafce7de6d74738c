"""Worker presence in Redis: what another process wrote there is read one report at a
time, so one that cannot be read never hides the others. What every presence backend
does alike is the port's suite (``ports/test_presence.py``)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
from structlog.testing import capture_logs

from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.presence import RedisPresence
from jobledger.infra.presence import WorkerInfo
from jobledger.schemas.rows import ProgressRow

AT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
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
