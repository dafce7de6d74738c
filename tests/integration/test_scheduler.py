"""The scheduler on PostgreSQL and Redis, with injected clocks."""

import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
import redis
from tests.conftest import actor

from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.leadership import LeaderTiming, RedisLeadership
from jobledger.adapters.sql.epochs import StoredEpochs
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, ExecutionStatus, occurrence_execution_id
from jobledger.domain.job import Job, MissReason
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy, RetryPolicy
from jobledger.domain.schedules import CronSchedule, OneShotSchedule
from jobledger.infra.settings import load_settings
from jobledger.projections.queue.backend import QueueState
from jobledger.runtime.scheduler import SCHEDULER_ACTOR, Scheduler, SchedulerConfig
from jobledger.services.executions import Executions
from jobledger.services.jobs import Jobs

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NEW_YORK = ZoneInfo("America/New_York")


class ForcedLeadership:
    """A scheduler that believes it leads, whatever Redis says (split brain)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.changes = 0

    def tick(self) -> None:
        return None

    def is_leader(self) -> bool:
        return True

    def release(self) -> None:
        return None


@pytest.fixture
def containers(postgres_url: str, redis_server: str) -> Iterator[list[Container]]:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    settings = load_settings(
        {},
        test_handlers="true",
        database_url=postgres_url,
        redis_url=redis_server,
        redis_prefix=prefix,
    )
    with bootstrap(settings) as first, bootstrap(settings) as second:
        yield [first, second]


def cron_job(container: Container, cron: str, *, zone: str = "UTC", **extra: Any) -> Job:
    definition = JobDefinition(
        name=f"job {uuid.uuid4().hex[:6]}",
        spec=ExecutionSpec(handler="test.echo"),
        schedule=CronSchedule(cron, zone),
        **extra,
    )
    return Jobs(container.ledger).schedule(
        definition, at=T0 - timedelta(seconds=30), by=actor("test")
    )


def fired(container: Container) -> list[tuple[uuid.UUID, datetime]]:
    """(job id, scheduled_for) of every JobFired in the log."""
    notifications = container.ledger.recorder.select_notifications(
        start=1, limit=1_000_000, topics=[Job.Fired.TOPIC]
    )
    events = [container.ledger.mapper.to_domain_event(n) for n in notifications]
    return [(e.originator_id, vars(e)["scheduled_for"]) for e in events]


def enqueued(container: Container) -> list[Any]:
    notifications = container.ledger.recorder.select_notifications(
        start=1, limit=1_000_000, topics=[Execution.Enqueued.TOPIC]
    )
    return [container.ledger.mapper.to_domain_event(n) for n in notifications]


def test_split_brain_fires_each_occurrence_once(containers: list[Container]) -> None:
    """If two schedulers both act as leader for many ticks over 200 cron jobs, then every
    (job, scheduled_for) fires exactly once and the rejected duplicates are counted."""
    jobs = [cron_job(containers[0], "* * * * *") for _ in range(200)]
    schedulers = [c.scheduler(ForcedLeadership(epoch=i + 1)) for i, c in enumerate(containers)]
    for minute in range(8):
        now = T0 + timedelta(minutes=minute, seconds=1)
        barrier = threading.Barrier(2)

        def tick(index: int, now: datetime = now, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            schedulers[index].tick(now)

        threads = [threading.Thread(target=tick, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    fires = fired(containers[0])
    counts = Counter(fires)
    assert len(counts) == 200 * 8
    assert set(counts.values()) == {1}
    expected = {(j.id, T0 + timedelta(minutes=m)) for j in jobs for m in range(8)}
    assert set(counts) == expected
    assert sum(s.stats.fired for s in schedulers) == 200 * 8
    assert sum(s.stats.conflicts for s in schedulers) > 0
    executions = enqueued(containers[0])
    assert len(executions) == 200 * 8
    assert all(e.ready_at >= e.scheduled_for for e in executions)


@pytest.mark.parametrize(
    ("policy", "fires", "missed"),
    [
        (MisfirePolicy.SKIP, 1, 10),
        (MisfirePolicy.FIRE_ONCE, 2, 9),
        (MisfirePolicy.FIRE_ALL, 4, 7),
    ],
)
def test_downtime_follows_the_misfire_policy(
    containers: list[Container], policy: MisfirePolicy, fires: int, missed: int
) -> None:
    """If the scheduler was down 10 minutes, then a */1 job fires and records misses
    exactly as its misfire policy says (cap 3 for fire_all)."""
    job = cron_job(containers[0], "*/1 * * * *", misfire=policy, catch_up_cap=3)
    scheduler = containers[0].scheduler(ForcedLeadership(epoch=1))
    report = scheduler.tick(T0 + timedelta(minutes=10, seconds=30))
    assert (report.fired, report.missed) == (fires, missed)
    registry = scheduler.metrics.registry
    sample = registry.get_sample_value("jobledger_fires_missed_total", {"reason": "downtime"})
    assert sample == missed
    assert registry.get_sample_value("jobledger_fires_total") == fires
    history = list(containers[0].ledger.history(job.id))
    recorded = sum(vars(e)["count"] for e in history if isinstance(e, Job.FiresMissed))
    assert recorded == missed
    assert sum(1 for e in history if isinstance(e, Job.Fired)) == fires
    assert containers[0].ledger.get_job(job.id).next_fire_at == T0 + timedelta(minutes=11)


def catch_up_checkpoint(container: Container) -> None:
    projector = container.projector()
    while projector.checkpoint.step():
        pass


def test_catch_up_fires_follow_the_overlap_policy(containers: list[Container]) -> None:
    """If a */2 skip_if_running job with fire_all (cap 3) comes back from downtime, then
    the tick fires one late run, not three; and if a run of it is still open, none."""
    container = containers[0]
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    idle, busy = (
        cron_job(
            container,
            "*/2 * * * *",
            misfire=MisfirePolicy.FIRE_ALL,
            catch_up_cap=3,
            overlap=OverlapPolicy.SKIP_IF_RUNNING,
        )
        for _ in range(2)
    )
    Jobs(container.ledger).trigger(busy.id, key="still-running", by=actor("test"), at=T0)
    catch_up_checkpoint(container)
    report = scheduler.tick(T0 + timedelta(minutes=10, seconds=30))
    assert report.fired == 1
    assert [at for job_id, at in fired(container) if job_id == idle.id] == [T0]
    assert [at for job_id, at in fired(container) if job_id == busy.id] == []
    for job in (idle, busy):
        history = list(container.ledger.history(job.id))
        misses = [vars(e) for e in history if isinstance(e, Job.FiresMissed)]
        overlap = sum(m["count"] for m in misses if m["reason"] == MissReason.OVERLAP)
        assert overlap == (3 if job is idle else 4)  # :02 :04 and :10; :00 too if busy
        assert sum(m["count"] for m in misses) == (5 if job is idle else 6)


def local_days(fires: list[tuple[uuid.UUID, datetime]], job: Job) -> Counter[str]:
    return Counter(str(at.astimezone(NEW_YORK).date()) for job_id, at in fires if job_id == job.id)


@pytest.mark.parametrize("day", ["2026-03-08", "2026-11-01"])
def test_dst_days_in_new_york(containers: list[Container], day: str) -> None:
    """If a 02:30 daily job and an hourly job run across a DST change in New York, then
    the daily one fires once per local day and the hourly one 23 or 25 times that day."""
    start = datetime.fromisoformat(day).replace(tzinfo=NEW_YORK) - timedelta(days=1)
    container = containers[0]
    at = start.astimezone(UTC) - timedelta(seconds=1)
    daily = Jobs(container.ledger).schedule(
        JobDefinition(
            name="daily",
            spec=ExecutionSpec(handler="test.echo"),
            schedule=CronSchedule("30 2 * * *", "America/New_York"),
        ),
        at=at,
        by=actor("t"),
    )
    hourly = Jobs(container.ledger).schedule(
        JobDefinition(
            name="hourly",
            spec=ExecutionSpec(handler="test.echo"),
            schedule=CronSchedule("0 * * * *", "America/New_York"),
        ),
        at=at,
        by=actor("t"),
    )
    # Ticks every 15 minutes, with a grace that makes each fire on time, not late.
    config = SchedulerConfig(grace=timedelta(minutes=20))
    scheduler = container.scheduler(ForcedLeadership(epoch=1), config)
    now = start.astimezone(UTC)
    while now < start.astimezone(UTC) + timedelta(days=3):
        scheduler.tick(now)
        now += timedelta(minutes=15)
    fires = fired(container)
    assert scheduler.stats.missed == 0
    daily_days = local_days(fires, daily)
    assert set(daily_days.values()) == {1}
    assert len(daily_days) == 3
    expected_hours = 23 if day.startswith("2026-03") else 25
    assert local_days(fires, hourly)[day] == expected_hours


def test_leadership_moves_on_when_the_leader_stops_renewing(
    redis_server: str, containers: list[Container]
) -> None:
    """If the leader stops renewing, then it stops acting at its own deadline, a standby
    takes over with a higher epoch, and the old leader cannot renew the new lock."""
    client = redis.Redis.from_url(redis_server)
    keys = Keys(f"l{uuid.uuid4().hex[:8]}")
    timing = LeaderTiming(ttl=0.4, renew_every=0.1, poll=0.05)
    clock = {"a": 0.0, "b": 0.0}
    epochs = StoredEpochs(containers[0].database)
    a = RedisLeadership(client, keys, epochs, timing=timing, clock=lambda: clock["a"], name="a")
    b = RedisLeadership(client, keys, epochs, timing=timing, clock=lambda: clock["b"], name="b")
    a.tick()
    b.tick()
    assert a.is_leader()
    assert not b.is_leader()
    first_epoch = a.epoch
    clock["a"] += 0.5  # a is paused past its ttl without renewing
    assert not a.is_leader()
    time.sleep(0.45)  # the lock expires in Redis too
    clock["b"] += 0.5
    b.tick()
    assert b.is_leader()
    assert b.epoch > first_epoch
    a.tick()  # a wakes up and tries to renew: the lock is b's now
    assert not a.is_leader()
    b.release()
    assert client.get(keys.leader) is None
    clock["a"] += 1
    a.tick()
    assert a.is_leader()
    assert a.epoch > b.epoch
    client.close()


def test_only_the_elected_scheduler_fires(containers: list[Container]) -> None:
    """If two schedulers run with real election, then only the leader fires, and the
    other does nothing; the leader's metrics count its election and its release."""
    for _ in range(5):
        cron_job(containers[0], "* * * * *")
    schedulers = [c.scheduler() for c in containers]
    for scheduler in schedulers:
        scheduler.leadership.tick()
    leaders = [s for s in schedulers if s.leadership.is_leader()]
    assert len(leaders) == 1
    reports = [s.tick(T0 + timedelta(seconds=5)) for s in schedulers]
    assert sorted(r.acted for r in reports) == [False, True]
    assert sum(r.fired for r in reports) == 5
    per_job: defaultdict[uuid.UUID, int] = defaultdict(int)
    for job_id, _ in fired(containers[0]):
        per_job[job_id] += 1
    assert set(per_job.values()) == {1}
    for scheduler in schedulers:
        scheduler.observe(T0)
        scheduler.leadership.release()
        scheduler.observe(T0)
    changes = [leader_changes(s) for s in schedulers]
    assert sorted(changes) == [0.0, 2.0]  # the leader was elected, then released the lock


def leader_changes(scheduler: Scheduler) -> float:
    value = scheduler.metrics.registry.get_sample_value("jobledger_leader_changes_total")
    assert value is not None
    return value


def adhoc(container: Container, max_retries: int) -> Execution:
    return Executions(container.ledger).run(
        ExecutionSpec(handler="test.echo", retry=RetryPolicy(max_retries=max_retries)),
        key=uuid.uuid4().hex,
        at=T0,
        by=actor(),
    )


def project(container: Container) -> None:
    projector = container.projector()
    try:
        while projector.queue.step():
            pass
    finally:
        projector.close()  # what its steps opened: not left to the collector's thread


def lease_one(container: Container, ttl: timedelta) -> None:
    """Lease the queue's one ready run at T0 as a worker would (the queue, then the log)."""
    project(container)
    [lease] = container.queue.lease("default", lease_ids=[uuid.uuid4()], ttl=ttl, now=T0)
    leased = container.ledger.get_execution(lease.execution_id)
    leased.lease(worker_id="gone", lease_id=lease.lease_id, lease_expires_at=lease.deadline)
    container.ledger.save_all(leased)
    project(container)


@pytest.mark.parametrize(("max_retries", "ends"), [(1, "Retried"), (0, "DeadLettered")])
def test_recovery_turns_an_expired_lease_into_a_retry_or_a_dead_letter(
    containers: list[Container], max_retries: int, ends: str
) -> None:
    """If a worker leased an execution and vanished, then after the deadline the leader
    records the expiry as a failed attempt: a retry, or a dead letter when spent."""
    container = containers[0]
    execution = adhoc(container, max_retries)
    lease_one(container, timedelta(seconds=30))
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    assert scheduler.recover(T0 + timedelta(seconds=10)) == 0  # not yet expired
    assert scheduler.recover(T0 + timedelta(seconds=31)) == 1
    names = [type(e).__name__ for e in container.ledger.history(execution.id)]
    assert names[-2:] == ["LeaseExpired", ends]
    project(container)
    assert container.queue.expired("default", now=T0 + timedelta(hours=1), limit=10) == []


def test_recovery_repairs_a_lease_the_log_never_recorded(containers: list[Container]) -> None:
    """If the queue holds a lease with no ExecutionLeased in the log, then recovery puts
    the entry back as the log says: pending."""
    container = containers[0]
    execution = adhoc(container, 1)
    project(container)
    container.queue.lease("default", lease_ids=[uuid.uuid4()], ttl=timedelta(seconds=5), now=T0)
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    assert scheduler.recover(T0 + timedelta(seconds=6)) == 0
    assert scheduler.stats.queue_repairs == 1
    [item] = container.queue.items("default")
    assert item.execution_id == execution.id
    assert item.state is QueueState.PENDING


def test_a_one_shot_saved_after_its_time_fires_at_once(containers: list[Container]) -> None:
    """If a one-shot job is created a few seconds after its run_at, then the next tick
    fires it for that run_at (late, within the misfire grace); one whose run_at is
    later waits for it."""
    container = containers[0]
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    ledger = container.ledger

    def once(run_at: datetime) -> Job:
        definition = JobDefinition(
            name=f"once {uuid.uuid4().hex[:6]}",
            spec=ExecutionSpec(handler="test.echo"),
            schedule=OneShotSchedule(run_at),
        )
        return Jobs(ledger).schedule(definition, at=T0, by=actor("test"))

    late, ahead = once(T0 - timedelta(seconds=5)), once(T0 + timedelta(minutes=5))
    assert scheduler.tick(T0 + timedelta(seconds=1)).fired == 1
    assert fired(container) == [(late.id, T0 - timedelta(seconds=5))]
    assert scheduler.tick(T0 + timedelta(minutes=5)).fired == 1
    assert fired(container)[-1] == (ahead.id, T0 + timedelta(minutes=5))


def revised(job: Job, version: int) -> JobDefinition:
    """The job's definition with a payload that says which revision it is."""
    spec = msgspec.structs.replace(job.definition.spec, payload={"revision": version})
    return msgspec.structs.replace(job.definition, spec=spec)


def payloads(container: Container, job: Job) -> list[Any]:
    return [e.spec.payload for e in enqueued(container) if e.job_id == job.id]


def test_a_held_job_an_operator_changes_fires_with_its_new_definition(
    containers: list[Container],
) -> None:
    """If an operator changes a job the leader holds in memory, then the job index drops
    the copy and the next fire carries the new definition without a conflict; a job
    the leader holds fires without being loaded again."""
    container, operator = containers
    job = cron_job(container, "* * * * *")
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    assert scheduler.tick(T0 + timedelta(seconds=1)).fired == 1
    Jobs(operator.ledger).update(
        job.id, revised(job, 2), at=T0 + timedelta(seconds=5), by=actor("op")
    )
    report = scheduler.tick(T0 + timedelta(minutes=1, seconds=1))
    assert (report.fired, report.conflicts) == (1, 0)
    assert payloads(container, job) == [{}, {"revision": 2}]
    assert scheduler.jobs.loaded == 2
    assert scheduler.tick(T0 + timedelta(minutes=2, seconds=1)).fired == 1
    assert scheduler.jobs.loaded == 2  # held since its last fire


def test_a_held_copy_the_store_refuses_is_dropped_and_loaded_again(
    containers: list[Container], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a job changes after the tick caught the job index up, then the fire from the
    leader's copy is refused by the store's version check and counted as a conflict,
    the copy is dropped, and the next tick fires the job with its new definition."""
    container, operator = containers
    job = cron_job(container, "* * * * *")
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    scheduler.tick(T0 + timedelta(seconds=1))
    due = scheduler.index.due

    def due_then_changed(now: datetime, *, limit: int) -> list[uuid.UUID]:
        found = due(now, limit=limit)
        Jobs(operator.ledger).update(job.id, revised(job, 2), at=now, by=actor("op"))
        return found

    monkeypatch.setattr(scheduler.index, "due", due_then_changed)
    report = scheduler.tick(T0 + timedelta(minutes=1, seconds=1))
    assert (report.fired, report.conflicts) == (0, 1)
    monkeypatch.undo()
    report = scheduler.tick(T0 + timedelta(minutes=2, seconds=1))
    assert (report.fired, report.conflicts) == (1, 0)
    assert payloads(container, job) == [{}, {"revision": 2}]
    assert [at for _, at in fired(container)] == [T0, T0 + timedelta(minutes=2)]


def test_a_leader_whose_index_moved_without_it_drops_its_copies(
    containers: list[Container],
) -> None:
    """If another scheduler caught the shared job index up past a change, then the
    leader, which never read that change, drops every copy it held and fires from the
    store's state, without a conflict; so does a leader whose term changed."""
    container, other = containers
    job = cron_job(container, "* * * * *")
    leadership = ForcedLeadership(epoch=1)
    scheduler = container.scheduler(leadership)
    scheduler.tick(T0 + timedelta(seconds=1))
    Jobs(other.ledger).update(job.id, revised(job, 2), at=T0 + timedelta(seconds=5), by=actor())
    other.scheduler(ForcedLeadership(epoch=1)).index.catch_up()
    report = scheduler.tick(T0 + timedelta(minutes=1, seconds=1))
    assert (report.fired, report.conflicts) == (1, 0)
    assert payloads(container, job) == [{}, {"revision": 2}]
    leadership.epoch = 2
    scheduler.tick(T0 + timedelta(minutes=2, seconds=1))
    assert scheduler.jobs.loaded == 3


def test_a_tick_with_nothing_due_loads_the_jobs_due_soon(containers: list[Container]) -> None:
    """If nothing is due, then the tick loads the jobs due within the preload window, so
    the tick that fires them loads nothing; a change made in between still reaches the
    fire (the job index drops the preloaded copy), without a conflict."""
    container, operator = containers
    soon, later = cron_job(container, "1 12 * * *"), cron_job(container, "30 12 * * *")
    steady = cron_job(container, "2 12 * * *")
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    assert scheduler.tick(T0 + timedelta(seconds=30)).fired == 0
    assert scheduler.jobs.loaded == 1  # the job due at 12:01, not the one at 12:30
    assert scheduler.tick(T0 + timedelta(seconds=40)).fired == 0
    assert scheduler.jobs.loaded == 1  # within half the window: not looked at again
    Jobs(operator.ledger).update(
        soon.id, revised(soon, 2), at=T0 + timedelta(seconds=45), by=actor("op")
    )
    report = scheduler.tick(T0 + timedelta(minutes=1, seconds=1))
    assert (report.fired, report.conflicts) == (1, 0)
    assert payloads(container, soon) == [{"revision": 2}]
    assert scheduler.tick(T0 + timedelta(minutes=1, seconds=30)).fired == 0  # preloads 12:02
    loaded = scheduler.jobs.loaded
    assert scheduler.tick(T0 + timedelta(minutes=2, seconds=1)).fired == 1
    assert scheduler.jobs.loaded == loaded
    assert [job_id for job_id, _ in fired(container)] == [soon.id, steady.id]
    assert later.id not in {job_id for job_id, _ in fired(container)}


def test_a_cancel_other_fire_cancels_the_running_run_and_runs(
    containers: list[Container],
) -> None:
    """If a cancel_other job is due while a run of it is running, then the tick fires
    the occurrence and, in the same save, cancels the running run by the scheduler with
    a reason naming the fire; the queue then holds the new run only."""
    container = containers[0]
    job = cron_job(container, "* * * * *", overlap=OverlapPolicy.CANCEL_OTHER)
    running = Jobs(container.ledger).trigger(job.id, key="long", by=actor("test"), at=T0)
    lease_one(container, timedelta(minutes=5))
    catch_up_checkpoint(container)
    report = container.scheduler(ForcedLeadership(epoch=1)).tick(T0 + timedelta(seconds=1))
    assert report.fired == 1
    cancelled = container.ledger.get_execution(running.id)
    assert cancelled.status is ExecutionStatus.CANCELLED
    [event] = [
        e for e in container.ledger.history(running.id) if isinstance(e, Execution.Cancelled)
    ]
    assert event.by == SCHEDULER_ACTOR
    assert T0.isoformat() in event.reason
    fresh = occurrence_execution_id(job.id, T0)
    assert container.ledger.get_execution(fresh).status is ExecutionStatus.PENDING
    project(container)
    assert [item.execution_id for item in container.queue.items("default")] == [fresh]


def test_buffer_all_runs_take_turns_in_firing_order(containers: list[Container]) -> None:
    """If a buffer_all job fires twice while neither run has started, then a lease
    round takes the first occurrence's run only, and the second's once the first has
    completed: every fire runs, one at a time, in order."""
    container = containers[0]
    project(container)  # the queue's first load, before any limit (a rebuild closes them)
    job = cron_job(container, "* * * * *", overlap=OverlapPolicy.BUFFER_ALL)
    scheduler = container.scheduler(ForcedLeadership(epoch=1))
    assert scheduler.tick(T0 + timedelta(seconds=1)).fired == 1
    assert scheduler.tick(T0 + timedelta(seconds=61)).fired == 1
    first, second = (occurrence_execution_id(job.id, T0 + timedelta(minutes=m)) for m in (0, 1))
    project(container)
    now = T0 + timedelta(seconds=62)

    def lease_round() -> list[uuid.UUID]:
        taken = container.queue.lease_round(
            "default", lease_ids=[uuid.uuid4(), uuid.uuid4()], ttl=timedelta(minutes=5), now=now
        )
        for lease in taken.leases:
            run = container.ledger.get_execution(lease.execution_id)
            run.lease(worker_id="w", lease_id=lease.lease_id, lease_expires_at=lease.deadline)
            container.ledger.save_all(run)
        project(container)
        return [lease.execution_id for lease in taken.leases]

    assert lease_round() == [first]
    assert lease_round() == []
    done = container.ledger.get_execution(first)
    assert done.lease_id is not None
    done.complete(lease_id=done.lease_id, duration=timedelta(seconds=1), result={})
    container.ledger.save_all(done)
    project(container)
    assert lease_round() == [second]


def test_a_listening_leader_reads_the_index_only_when_the_log_moved(
    containers: list[Container],
) -> None:
    """If a leading scheduler listens on the log and nothing is due, then its ticks
    leave the job index unread; if a job is saved meanwhile, then the listener wakes it
    and the next tick reads the index and fires the job."""
    container = containers[0]
    scheduler = container.scheduler(ForcedLeadership(epoch=1), SchedulerConfig(look_every=60))
    releases = scheduler.releases
    assert releases is not None
    releases.start()
    try:
        deadline = time.monotonic() + 10
        while not releases.listening:
            assert time.monotonic() < deadline, "the listener did not connect"
            time.sleep(0.01)
        now = datetime.now(UTC)
        scheduler.tick(now)
        looks = scheduler.stats.looks
        for _ in range(5):
            scheduler.tick(datetime.now(UTC))
        assert scheduler.stats.looks == looks

        definition = JobDefinition(
            name=f"once {uuid.uuid4().hex[:6]}",
            spec=ExecutionSpec(handler="test.echo"),
            schedule=OneShotSchedule(now),
        )
        job = Jobs(container.ledger).schedule(definition, at=now, by=actor("test"))
        while not fired(container):
            assert time.monotonic() < deadline, "the saved job was not fired"
            scheduler.tick(datetime.now(UTC))
            time.sleep(0.01)
        assert fired(container) == [(job.id, now)]
        assert scheduler.stats.looks > looks
    finally:
        releases.stop()
