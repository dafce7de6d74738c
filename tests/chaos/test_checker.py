"""The history checker on histories written by hand: a clean one passes, and each
broken promise is found and named.

A ``Story`` writes the events a healthy deployment would write; each test then breaks
one thing (a lost run, a double fire, two outcomes, an early start, an overlap breach,
a falling epoch, a queue that differs from the log, ...) and checks that the checker
names that promise and its subject. The last test records a history with the real
ledger, so the checker reads the events' fields as the log really holds them.
"""

import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.chaos import folds
from tests.chaos.checker import Verdict, check
from tests.chaos.history import Accepted, Effect, Event, Fault, History, Views, read_log

from jobledger.adapters.store import migrate, open_ledger
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy, RetryPolicy
from jobledger.domain.schedules import CronSchedule, OneShotSchedule
from jobledger.infra.settings import load_settings

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WORKER = "host-4242"
RETRY = RetryPolicy(max_retries=1, initial_backoff=timedelta(seconds=2), jitter=False)
SPEC = ExecutionSpec(handler="chaos.effect", retry=RETRY)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


class Story:
    """Events, effects and accepted requests, as a healthy deployment records them."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.effects: list[Effect] = []
        self.accepted: list[Accepted] = []
        self.answers: dict[str, frozenset[uuid.UUID]] = {}
        self._versions: Counter[uuid.UUID] = Counter()

    def add(self, stream: uuid.UUID, kind: str, at: datetime, **data: Any) -> Event:
        self._versions[stream] += 1
        event = Event(len(self.events) + 1, stream, self._versions[stream], kind, at, data)
        self.events.append(event)
        return event

    def enqueue(self, at: datetime, **fields: Any) -> uuid.UUID:
        execution_id = uuid.uuid4()
        data = {"job_id": None, "spec": SPEC, "trigger": Trigger.ADHOC, "scheduled_for": None}
        data |= {"trigger_key": None, "ready_at": at, "attempt": 1} | fields
        self.add(execution_id, "ExecutionEnqueued", at, **data)
        return execution_id

    def lease(
        self, execution_id: uuid.UUID, at: datetime, attempt: int = 1, worker: str = WORKER
    ) -> uuid.UUID:
        lease_id = uuid.uuid4()
        self.add(
            execution_id,
            "ExecutionLeased",
            at,
            attempt=attempt,
            worker_id=worker,
            lease_id=lease_id,
            lease_expires_at=at + seconds(3),
        )
        return lease_id

    def run_handler(
        self,
        execution_id: uuid.UUID,
        start: datetime,
        attempt: int = 1,
        worker: str = WORKER,
        *,
        durable: bool = True,
    ) -> None:
        self.effects.append(
            Effect(
                uuid.uuid4().hex,
                execution_id,
                attempt,
                worker,
                start,
                start + seconds(0.2),
                durable,
            )
        )

    def complete(self, execution_id: uuid.UUID, lease_id: uuid.UUID, at: datetime) -> None:
        self.add(
            execution_id,
            "ExecutionCompleted",
            at,
            lease_id=lease_id,
            duration=seconds(0.2),
            result={},
        )

    def retry(
        self,
        execution_id: uuid.UUID,
        lease_id: uuid.UUID,
        at: datetime,
        ready_at: datetime,
        *,
        expired: bool = False,
        next_attempt: int = 2,
    ) -> None:
        """The attempt failed (or its lease ``expired``); the next is ready at ``ready_at``."""
        if expired:
            self.add(execution_id, "ExecutionLeaseExpired", at, lease_id=lease_id)
        self.add(
            execution_id,
            "ExecutionRetried",
            at,
            lease_id=lease_id,
            error="x",
            next_attempt=next_attempt,
            ready_at=ready_at,
        )

    def adhoc(self, at: datetime, key: str | None = None) -> uuid.UUID:
        """An ad-hoc run accepted at ``at``, run once and completed."""
        execution_id = self.enqueue(at, trigger_key=key)
        self.accepted.append(Accepted("adhoc", at, execution_id=execution_id, key=key))
        if key is not None:
            self.answers[key] = frozenset({execution_id})
        lease_id = self.lease(execution_id, at + seconds(0.1))
        self.run_handler(execution_id, at + seconds(0.15))
        self.complete(execution_id, lease_id, at + seconds(0.5))
        return execution_id

    def job(self, at: datetime, **definition: Any) -> uuid.UUID:
        job_id = uuid.uuid4()
        fields: dict[str, Any] = {"name": "every minute", "spec": SPEC}
        fields["schedule"] = CronSchedule("* * * * *")
        self.add(
            job_id,
            "JobScheduled",
            at,
            definition=JobDefinition(**(fields | definition)),
            key=None,
            next_fire_at=at.replace(second=0) + MINUTE,
            by="admin",
        )
        self.accepted.append(Accepted("job", at, job_id=job_id))
        return job_id

    def fire(
        self, job_id: uuid.UUID, occurrence: datetime, *, epoch: int = 1, delay: float = 0.05
    ) -> uuid.UUID:
        """The occurrence fired ``delay`` s after it was due; its execution is enqueued."""
        execution_id = uuid.uuid4()
        at = occurrence + seconds(delay)
        self.add(
            job_id,
            "JobFired",
            at,
            scheduled_for=occurrence,
            execution_id=execution_id,
            next_fire_at=occurrence + MINUTE,
            leader_epoch=epoch,
        )
        data = {"job_id": job_id, "trigger": Trigger.SCHEDULE, "scheduled_for": occurrence}
        data |= {"spec": SPEC, "trigger_key": None, "ready_at": at, "attempt": 1}
        self.add(execution_id, "ExecutionEnqueued", at, **data)
        return execution_id

    def finish(self, execution_id: uuid.UUID, at: datetime) -> None:
        lease_id = self.lease(execution_id, at)
        self.run_handler(execution_id, at + seconds(0.05))
        self.complete(execution_id, lease_id, at + seconds(0.3))

    def history(self, **changes: Any) -> History:
        base = History(
            events=self.events,
            effects=self.effects,
            accepted=self.accepted,
            answers=self.answers,
            grace=seconds(5),
            settled_at=T0 + 10 * MINUTE,
        )
        return replace(base, **changes)


def clean_story() -> Story:
    """Ad-hoc runs, a retry, a dead letter requeued and dead again, a cancel, and a
    cron job fired three times by two leaders in turn."""
    story = Story()
    story.adhoc(T0, key="k1")
    story.adhoc(T0 + seconds(1))
    retried = story.enqueue(T0 + seconds(2))
    first = story.lease(retried, T0 + seconds(2.1))
    story.run_handler(retried, T0 + seconds(2.1), durable=False)
    story.retry(retried, first, T0 + seconds(2.4), T0 + seconds(4.4))
    second = story.lease(retried, T0 + seconds(4.5), attempt=2)
    story.run_handler(retried, T0 + seconds(4.5), attempt=2)
    story.complete(retried, second, T0 + seconds(4.8))
    job_id = story.job(T0 + seconds(5))
    for n, epoch in ((1, 1), (2, 1), (3, 2)):
        story.finish(
            story.fire(job_id, T0 + n * MINUTE, epoch=epoch), T0 + n * MINUTE + seconds(0.2)
        )
    story.add(job_id, "JobPaused", T0 + 3 * MINUTE + seconds(10), by="admin", reason="")
    return story


def names(verdict: Verdict) -> set[str]:
    return {v.invariant for v in verdict.violations}


def test_a_clean_history_passes() -> None:
    """If a healthy run's history is checked, then the checker finds no violation and
    counts every execution, invocation and attempt."""
    verdict = check(clean_story().history())
    assert verdict.violations == []
    assert verdict.statuses == Counter({"completed": 6})
    assert (verdict.invocations, verdict.attempts) == (7, 7)
    assert verdict.duplicates == []


def test_a_lost_run_is_named() -> None:
    """If an accepted run never ends, or is missing from the log, then it is named lost."""
    story = clean_story()
    stuck = story.enqueue(T0 + seconds(30))
    story.accepted.append(Accepted("adhoc", T0 + seconds(30), execution_id=stuck))
    missing = uuid.uuid4()
    story.accepted.append(Accepted("adhoc", T0 + seconds(31), execution_id=missing))
    lost = check(story.history()).lost
    assert [v.subject for v in lost] == [f"execution {stuck}", f"execution {missing}"]
    assert "still pending after quiescence" in lost[0].detail
    assert "accepted (adhoc) but not in the log" in lost[1].detail


def test_an_occurrence_never_fired_is_named_lost() -> None:
    """If a job's due occurrence is neither fired nor recorded missed by the time the
    run settled, or is skipped over by the next fire, then it is named lost."""
    story = Story()
    overdue = story.job(T0)
    skipped = story.job(T0)
    story.finish(story.fire(skipped, T0 + 2 * MINUTE), T0 + 2 * MINUTE + seconds(1))
    story.add(skipped, "JobPaused", T0 + 2 * MINUTE + seconds(2), by="admin", reason="")
    verdict = check(story.history(settled_at=T0 + 3 * MINUTE))
    details = {v.subject: v.detail for v in verdict.lost}
    assert "was neither fired nor recorded as missed" in details[f"job {skipped}"]
    assert "still unfired" in details[f"job {overdue}"]


def test_a_double_fire_is_named() -> None:
    """If one occurrence of a job is fired twice, then the checker names a double fire
    of that job and that occurrence."""
    story = clean_story()
    job_id = next(e.stream for e in story.events if e.type == "JobScheduled")
    again = story.fire(job_id, T0 + 2 * MINUTE, epoch=2)
    story.finish(again, T0 + 2 * MINUTE + seconds(2))
    found = check(story.history()).named(folds.DOUBLE_FIRE)
    assert found
    assert {v.subject for v in found} == {f"job {job_id}"}
    assert all((T0 + 2 * MINUTE).isoformat() in v.detail for v in found)


def test_two_accepted_outcomes_are_named() -> None:
    """If an execution is completed twice, or completed after a lease expiry settled
    its lease, then the checker names two outcomes or a stale outcome."""
    story = Story()
    twice = story.adhoc(T0)
    lease_id = next(e.data["lease_id"] for e in story.events if e.type == "ExecutionLeased")
    story.complete(twice, lease_id, T0 + seconds(1))
    expired = story.enqueue(T0 + seconds(2))
    gone = story.lease(expired, T0 + seconds(2))
    story.retry(expired, gone, T0 + seconds(6), T0 + seconds(8), expired=True)
    story.complete(expired, gone, T0 + seconds(7))
    verdict = check(story.history())
    assert [v.subject for v in verdict.named(folds.TWO_OUTCOMES)][:1] == [f"execution {twice}"]
    stale = verdict.named(folds.STALE_OUTCOME)
    assert [v.subject for v in stale] == [f"execution {expired}"]
    assert "which had expired" in stale[0].detail


def test_an_early_start_is_named() -> None:
    """If a lease or a handler start comes before the execution was ready, or a retry
    before its back-off ended, then the checker names each as early."""
    story = Story()
    delayed = story.enqueue(T0, ready_at=T0 + seconds(10))
    lease_id = story.lease(delayed, T0 + seconds(8))
    story.run_handler(delayed, T0 + seconds(8))
    story.complete(delayed, lease_id, T0 + seconds(9))
    hasty = story.enqueue(T0)
    first = story.lease(hasty, T0)
    story.retry(hasty, first, T0 + seconds(1), T0 + seconds(1))
    story.complete(hasty, story.lease(hasty, T0 + seconds(1.5), attempt=2), T0 + seconds(2))
    early = {
        (v.subject, v.detail.split(" ", 1)[0]) for v in check(story.history()).named(folds.EARLY)
    }
    assert early == {
        (f"execution {delayed}", "leased"),
        (f"execution {delayed}", "handler"),
        (f"execution {hasty}", "retried"),
    }


def test_an_attempt_over_budget_is_named() -> None:
    """If an execution is leased more than max_retries + 1 times in one budget, then
    the checker names it over budget; after a requeue a new budget begins."""
    story = Story()
    greedy = story.enqueue(T0)
    at = T0
    for attempt in (1, 2, 3):
        lease_id = story.lease(greedy, at, attempt=attempt)
        at += seconds(10)
        story.retry(greedy, lease_id, at, at, next_attempt=attempt + 1)
    story.add(greedy, "ExecutionCancelled", at, by="admin", reason="")
    over = check(story.history()).named(folds.OVER_BUDGET)
    assert [v.subject for v in over] == [f"execution {greedy}"]
    assert "attempt 3" in over[0].detail


def test_an_overlap_breach_is_named() -> None:
    """If a skip_if_running job fires while its previous run is still running, then the
    checker names an overlap breach naming the open run."""
    job_id, first, overlap = _overlapping(OverlapPolicy.SKIP_IF_RUNNING)
    assert [v.subject for v in overlap] == [f"job {job_id}"]
    assert f"{first} (running)" in overlap[0].detail


def _overlapping(policy: OverlapPolicy) -> tuple[uuid.UUID, uuid.UUID, list[Any]]:
    """A job of ``policy`` whose second fire runs and completes while its first run is
    still running: the job, the first run, and the overlap violations named."""
    story = Story()
    job_id = story.job(T0, overlap=policy)
    first = story.fire(job_id, T0 + MINUTE)
    lease_id = story.lease(first, T0 + MINUTE + seconds(1))
    story.finish(story.fire(job_id, T0 + 2 * MINUTE), T0 + 2 * MINUTE + seconds(1))
    story.run_handler(first, T0 + MINUTE + seconds(1))
    story.complete(first, lease_id, T0 + 2 * MINUTE + seconds(30))
    return job_id, first, check(story.history(settled_at=None)).named(folds.OVERLAP)


def test_buffer_all_runs_that_take_turns_pass_and_overlapping_ones_are_named() -> None:
    """If a buffer_all job's fires all run, each after the one before completed, then
    the checker accepts it; if a later run is leased while an earlier one still runs,
    then it names an overlap breach naming the running run."""
    story = Story()
    job_id = story.job(T0, overlap=OverlapPolicy.BUFFER_ALL)
    first = story.fire(job_id, T0 + MINUTE)
    second = story.fire(job_id, T0 + 2 * MINUTE)
    story.finish(first, T0 + 2 * MINUTE + seconds(1))
    story.finish(second, T0 + 2 * MINUTE + seconds(2))
    assert check(story.history(settled_at=None)).named(folds.OVERLAP) == []
    job_id, first, overlap = _overlapping(OverlapPolicy.BUFFER_ALL)
    assert [v.subject for v in overlap] == [f"job {job_id}"]
    assert f"{first} (running)" in overlap[0].detail


def test_cancel_other_fires_that_cancel_pass_and_a_survivor_is_named() -> None:
    """If a cancel_other job's fire cancels the run still running (by the scheduler, in
    its save), then the checker accepts the history, a handler's discard, a snooze
    and an expiry included; if the running run completes after the fire instead, then
    it names an overlap breach."""
    story = Story()
    job_id = story.job(T0, overlap=OverlapPolicy.CANCEL_OTHER)
    first = story.fire(job_id, T0 + MINUTE)
    story.lease(first, T0 + MINUTE + seconds(1))
    story.run_handler(first, T0 + MINUTE + seconds(1))
    second = story.fire(job_id, T0 + 2 * MINUTE)
    reason = "overlap cancel_other"
    story.add(first, "ExecutionCancelled", T0 + 2 * MINUTE, by="scheduler", reason=reason)
    snoozed = story.lease(second, T0 + 2 * MINUTE + seconds(1))
    ready = T0 + 2 * MINUTE + seconds(5)
    story.add(second, "ExecutionSnoozed", ready, lease_id=snoozed, reason="x", ready_at=ready)
    dropped = story.lease(second, T0 + 2 * MINUTE + seconds(6))
    story.run_handler(second, T0 + 2 * MINUTE + seconds(6))
    story.add(
        second,
        "ExecutionDiscarded",
        T0 + 2 * MINUTE + seconds(7),
        by="handler",
        reason="moot",
        lease_id=dropped,
    )
    unrun = story.enqueue(T0 + seconds(1))
    story.accepted.append(Accepted("adhoc", T0 + seconds(1), execution_id=unrun))
    story.add(unrun, "ExecutionExpired", T0 + seconds(9), expires_at=T0 + seconds(8))
    verdict = check(story.history(settled_at=None))
    assert verdict.violations == [], verdict.violations
    job_id, _first, overlap = _overlapping(OverlapPolicy.CANCEL_OTHER)
    assert [v.subject for v in overlap] == [f"job {job_id}"]


def test_a_misfire_against_the_policy_is_named() -> None:
    """If a skip-policy job fires an occurrence far later than the grace, or records an
    occurrence missed that was on time, then the checker names a misfire."""
    story = Story()
    skipper = story.job(T0, misfire=MisfirePolicy.SKIP)
    story.finish(story.fire(skipper, T0 + MINUTE, delay=30), T0 + MINUTE + seconds(31))
    hasty = story.job(T0)
    story.add(
        hasty,
        "JobFiresMissed",
        T0 + MINUTE + seconds(1),
        first=T0 + MINUTE,
        last=T0 + MINUTE,
        count=1,
        reason="downtime",
        policy="fire_once",
        next_fire_at=T0 + 2 * MINUTE,
    )
    verdict = check(story.history(settled_at=None))
    found = [(v.subject, v.detail) for v in verdict.named(folds.MISFIRE)]
    assert any(s == f"job {skipper}" and "later than the grace under skip" in d for s, d in found)
    assert any(s == f"job {hasty}" and "within the grace" in d for s, d in found)


def test_a_falling_epoch_is_named() -> None:
    """If a JobFired carries a lower leader epoch than one before it in the log, then
    the checker names the falling epoch and both positions."""
    story = Story()
    job_a, job_b = story.job(T0), story.job(T0)
    story.finish(story.fire(job_a, T0 + MINUTE, epoch=3), T0 + MINUTE + seconds(1))
    story.finish(story.fire(job_b, T0 + MINUTE, epoch=2, delay=0.5), T0 + MINUTE + seconds(1))
    epochs = check(story.history(settled_at=None)).named(folds.EPOCH)
    assert [v.subject for v in epochs] == [f"job {job_b}"]
    assert "epoch 2, after 3" in epochs[0].detail


def test_a_queue_that_differs_from_the_log_is_named() -> None:
    """If `queue verify` reported differences, the read models differ from a rebuild,
    or a dead-letter view differs from the log, then the checker names each view."""
    story = clean_story()
    dead = story.enqueue(T0 + seconds(40))
    story.add(dead, "ExecutionDeadLettered", T0 + seconds(41), lease_id=None, error="x", attempts=0)
    ghost = uuid.uuid4()
    views = Views(
        queue_differences=("default: abc is ready in the queue, not in the log",),
        read_models={"jobledger_rm_jobs": [("a", 1)]},
        rebuilt={"jobledger_rm_jobs": [("a", 2)]},
        dlq_read_model=frozenset({dead}),
        dlq_queue=frozenset({dead, ghost}),
    )
    verdict = check(story.history(views=views))
    assert [v.detail for v in verdict.named(folds.QUEUE)] == [views.queue_differences[0]]
    assert [v.subject for v in verdict.named(folds.READ_MODELS)] == ["jobledger_rm_jobs"]
    dlq = verdict.named(folds.DLQ)
    assert [(v.subject, "not dead in the log" in v.detail) for v in dlq] == [
        (f"execution {ghost}", True)
    ]


def test_idempotency_keys_that_name_two_executions_are_named() -> None:
    """If the API answered one key with two executions, or the log holds two
    executions for one key, then the checker names the key."""
    story = clean_story()
    story.answers["k2"] = frozenset({uuid.uuid4(), uuid.uuid4()})
    story.adhoc(T0 + seconds(50), key="k1")
    subjects = [v.subject for v in check(story.history()).named(folds.IDEMPOTENCY)]
    assert sorted(subjects) == ["key k1", "key k2"]


def test_an_invocation_without_a_lease_and_an_effectless_completion_are_named() -> None:
    """If a handler ran on a lease the log never recorded, or an execution completed
    though its attempt made no side effect, then the checker names the effect."""
    story = Story()
    ran = story.adhoc(T0)
    story.run_handler(ran, T0 + seconds(1), attempt=2, worker="host-7")
    hollow = story.enqueue(T0)
    story.complete(hollow, story.lease(hollow, T0 + seconds(1)), T0 + seconds(2))
    effects = check(story.history()).named(folds.EFFECT)
    assert [v.subject for v in effects] == [f"execution {ran}", f"execution {hollow}"]


def test_a_duplicated_side_effect_is_counted_with_its_cause() -> None:
    """If an execution's side effect was made twice because its first worker was
    killed before its report was saved, then that is no violation, but a duplicate
    whose cause names the fault on that worker."""
    story = Story()
    execution_id = story.enqueue(T0)
    first = story.lease(execution_id, T0, worker="host-100")
    story.run_handler(execution_id, T0 + seconds(0.1), worker="host-100")
    story.retry(execution_id, first, T0 + seconds(4), T0 + seconds(6), expired=True)
    second = story.lease(execution_id, T0 + seconds(6.5), attempt=2, worker="host-200")
    story.run_handler(execution_id, T0 + seconds(6.5), attempt=2, worker="host-200")
    story.complete(execution_id, second, T0 + seconds(7))
    kill = Fault("kill", "worker1", T0 + seconds(0.2), T0 + seconds(1), pid=100)
    verdict = check(story.history(faults=[kill]))
    assert verdict.violations == []
    assert [(d.execution_id, d.effects, d.cause) for d in verdict.duplicates] == [
        (execution_id, 2, "kill (worker1)")
    ]


def long_run_expired(story: Story, worker: str) -> uuid.UUID:
    """A run whose first lease, on ``worker``, expired 31 s in while it reported progress."""
    execution_id = story.enqueue(T0)
    first = story.lease(execution_id, T0, worker=worker)
    story.add(execution_id, "ExecutionProgressed", T0 + seconds(1), lease_id=first, progress={})
    story.retry(execution_id, first, T0 + seconds(31), T0 + seconds(33), expired=True)
    second = story.lease(execution_id, T0 + seconds(33), attempt=2, worker=worker)
    story.run_handler(execution_id, T0 + seconds(33), attempt=2, worker=worker)
    story.complete(execution_id, second, T0 + seconds(40))
    return execution_id


def test_a_lease_that_expired_under_a_live_worker_is_named() -> None:
    """If a lease expired with no fault on its worker's process or on a shared store
    while it was held, then the checker names a live lease expired; a SIGSTOP of that
    worker, or a Redis outage, during the lease explains it, and a fault on another
    worker or before the lease does not."""
    story = Story()
    execution_id = long_run_expired(story, worker="host-100")
    verdict = check(story.history())
    assert [v.subject for v in verdict.named(folds.LIVE_LEASE)] == [f"execution {execution_id}"]
    assert len(verdict.violations) == 1
    assert "attempt 1 on host-100 expired after 31.0 s" in verdict.violations[0].detail
    elsewhere = Fault("SIGSTOP worker", "worker2", T0 + seconds(2), T0 + seconds(20), pid=200)
    before = Fault("kill -9 worker", "worker1", T0 - seconds(30), T0 - seconds(20), pid=100)
    assert len(check(story.history(faults=[elsewhere, before])).named(folds.LIVE_LEASE)) == 1
    stopped = Fault("SIGSTOP worker", "worker1", T0 + seconds(2), T0 + seconds(20), pid=100)
    outage = Fault("redis kill -9", "redis", T0 + seconds(25), T0 + seconds(27))
    for fault in (stopped, outage):
        assert check(story.history(faults=[fault])).violations == []


def test_a_role_exit_and_an_unexpected_quarantine_are_named() -> None:
    """If a role exited by itself, or a stream not written as unprojectable was
    quarantined, then the checker names both; the injected stream is left out."""
    story = clean_story()
    injected, other = uuid.uuid4(), story.events[0].stream
    story.add(injected, "Undecodable", T0, topic="jobledger:ExecutionEnqueued")
    views = Views(quarantined=frozenset({injected, other}))
    verdict = check(
        story.history(views=views, injected=frozenset({injected}), exits=["worker2: exited with 1"])
    )
    assert [v.subject for v in verdict.named(folds.ROLE_EXIT)] == ["worker2"]
    assert [v.subject for v in verdict.named(folds.QUARANTINE)] == [f"stream {other}"]
    assert len(verdict.violations) == 2


def test_a_history_the_ledger_recorded_passes(tmp_path: Path) -> None:
    """If the real ledger records a run that is leased, fails, is retried after its
    back-off and completes, and a one-shot job that fires and runs, then reading its
    log gives a history in which the checker finds nothing wrong."""
    url = f"sqlite:///{tmp_path / 'events.sqlite3'}"
    migrate(load_settings({}, database_url=url), progress=lambda _: None)
    ledger = open_ledger(load_settings({}, database_url=url))
    quick = RetryPolicy(max_retries=1, initial_backoff=timedelta(milliseconds=20), jitter=False)
    spec = ExecutionSpec(handler="test.echo", retry=quick)
    try:
        execution = Execution.enqueue(
            spec=spec, ready_at=datetime.now(UTC), trigger=Trigger.ADHOC, trigger_key="one"
        )
        ledger.save_all(execution)
        run_attempt(ledger, execution.id, succeed=False)
        time.sleep(0.05)
        run_attempt(ledger, execution.id, succeed=True)
        due = datetime.now(UTC) + seconds(0.05)
        definition = JobDefinition(name="once", spec=spec, schedule=OneShotSchedule(due))
        job = Job.schedule(definition, at=datetime.now(UTC), by="admin")
        time.sleep(0.1)
        fired = job.fire(scheduled_for=due, leader_epoch=1, at=datetime.now(UTC))
        ledger.save_all(job, fired)
        run_attempt(ledger, fired.id, succeed=True)
        history = History(events=read_log(ledger), settled_at=datetime.now(UTC))
    finally:
        ledger.close()
    verdict = check(history)
    assert verdict.violations == []
    assert verdict.statuses == Counter({"completed": 2})
    assert verdict.attempts == 3


def run_attempt(ledger: Any, execution_id: uuid.UUID, *, succeed: bool) -> None:
    """One attempt of the execution, leased now, saved with its outcome."""
    execution = ledger.get_execution(execution_id)
    lease_id = uuid.uuid4()
    now = datetime.now(UTC)
    execution.lease(worker_id=WORKER, lease_id=lease_id, lease_expires_at=now + seconds(3))
    if succeed:
        execution.complete(lease_id=lease_id, duration=seconds(0), result={})
    else:
        execution.fail(lease_id=lease_id, error="boom", at=now)
    ledger.save_all(execution)
