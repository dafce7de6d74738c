"""The presence port's contract (``infra.presence.Presence``), run on every backend:
process memory (the embedded mode), one Redis server and a Redis Cluster."""

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from tests.integration.ports.backends import MEMORY_AND_REDIS, redis_under_a_prefix

from jobledger.adapters.memory.presence import MemoryPresence
from jobledger.adapters.redis.presence import RedisPresence
from jobledger.infra.presence import Presence, WorkerInfo
from jobledger.schemas.rows import ProgressRow
from jobledger.services.attendance import Attendance

# Microseconds on purpose: real heartbeats have them, and a backend must keep them.
AT = datetime(2026, 12, 7, 9, 0, 0, 123_457, tzinfo=UTC)
STALE = timedelta(seconds=30)
DAY = timedelta(days=1)


@pytest.fixture(params=MEMORY_AND_REDIS)
def presence(request: pytest.FixtureRequest) -> Presence:
    if request.param == "memory":
        return MemoryPresence()
    return RedisPresence(*redis_under_a_prefix(request))


def worker(
    worker_id: str, beat: datetime = AT, queues: tuple[str, ...] = ("default",)
) -> WorkerInfo:
    return WorkerInfo(
        worker_id=worker_id,
        queues=queues,
        slots=4,
        running=(uuid.UUID(int=7), uuid.UUID(int=8)),
        last_heartbeat=beat,
    )


def progress(percent: float, at: datetime) -> ProgressRow:
    return ProgressRow(percent=percent, message=f"{percent}%", data={"rows": [1, "a"]}, at=at)


# ---- which workers are alive --------------------------------------------------------


def test_a_report_lists_the_worker_as_it_reported_itself(presence: Presence) -> None:
    """If workers report, then the live list holds each one's latest report, field for
    field, once, sorted by worker id."""
    presence.report(worker("w2"))
    presence.report(worker("w1", AT - timedelta(seconds=5)))
    latest = worker("w1", AT, queues=("mail", "default"))
    presence.report(latest)
    assert presence.live(now=AT, stale_after=STALE) == [latest, worker("w2")]


def test_a_worker_silent_longer_than_stale_after_is_not_listed(presence: Presence) -> None:
    """If a worker's last report is older than ``stale_after``, then it is not listed,
    one exactly ``stale_after`` old still is, and one that reports again after being
    left out is listed again."""
    presence.report(worker("edge", AT - STALE))
    presence.report(worker("gone", AT - STALE - timedelta(microseconds=1)))
    assert [w.worker_id for w in presence.live(now=AT, stale_after=STALE)] == ["edge"]
    presence.report(worker("gone", AT))
    assert [w.worker_id for w in presence.live(now=AT, stale_after=STALE)] == ["edge", "gone"]


def test_a_worker_that_left_is_not_listed(presence: Presence) -> None:
    """If a worker leaves, then it alone is gone from the list; leaving twice, or as a
    worker never seen, changes nothing."""
    presence.report(worker("w1"))
    presence.report(worker("w2"))
    presence.leave("w1")
    presence.leave("w1")
    presence.leave("never-seen")
    assert [w.worker_id for w in presence.live(now=AT, stale_after=STALE)] == ["w2"]


# ---- which queues were served, and when -----------------------------------------------


def test_a_queue_is_last_served_at_its_latest_heartbeat(presence: Presence) -> None:
    """If workers serving a queue report, then the queue was last served at the latest
    of their heartbeats, to the microsecond: a report with an older heartbeat (a clock
    that lags) moves it back for no queue, and it is kept after the workers leave. A
    worker serving no queue serves none."""
    assert presence.last_served() == {}
    presence.report(worker("w1", AT, queues=("mail", "default")))
    presence.report(worker("w2", AT - DAY, queues=("mail", "reports")))
    presence.report(worker("idle", AT + DAY, queues=()))
    presence.leave("w1")
    presence.leave("w2")
    assert presence.last_served() == {"mail": AT, "default": AT, "reports": AT - DAY}


def test_a_queue_whose_workers_left_says_since_when_none_served_it(presence: Presence) -> None:
    """If the only worker of a queue reported last at AT and then left, then the queue
    is served while it is live and, after, unserved since AT; a queue no worker ever
    listed is unserved with no time; a worker whose clock lags moves no time back."""
    attendance = Attendance(presence, STALE)
    presence.report(worker("w1", AT, queues=("mail",)))
    presence.report(worker("w2", AT - DAY, queues=("mail",)))
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


# ---- a run's latest progress ----------------------------------------------------------


def test_a_runs_latest_progress_is_shown_until_replaced(presence: Presence) -> None:
    """If a run shows its progress twice, then the second is what it shows, field for
    field; another run shows its own, and a run that showed none shows nothing."""
    now = datetime.now(tz=UTC)
    run, other = uuid.uuid4(), uuid.uuid4()
    presence.show_progress(run, progress(10.0, now), timedelta(minutes=1))
    presence.show_progress(other, progress(80.0, now), timedelta(minutes=1))
    presence.show_progress(run, progress(20.5, now), timedelta(minutes=1))
    assert presence.progress_of(run, now=now) == progress(20.5, now)
    assert presence.progress_of(other, now=now) == progress(80.0, now)
    assert presence.progress_of(uuid.uuid4(), now=now) is None


def test_a_runs_progress_is_gone_once_its_ttl_passed(presence: Presence) -> None:
    """If a run's progress was shown for 50 ms and the run says nothing more, then after
    a tenth of a second it shows no progress (Redis expires it on its own clock, memory
    by the time asked about: both read the wall clock here)."""
    run = uuid.uuid4()
    presence.show_progress(run, progress(50.0, datetime.now(tz=UTC)), timedelta(milliseconds=50))
    time.sleep(0.1)
    assert presence.progress_of(run, now=datetime.now(tz=UTC)) is None
