"""The Execution aggregate: leases, outcomes, the attempt budget and terminal states."""

import dataclasses
import typing
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
)

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import (
    InvalidDefinitionError,
    InvalidTransitionError,
    StaleLeaseError,
)
from jobledger.domain.execution import (
    BY_HANDLER,
    MAX_SNOOZE,
    PERMANENT_FAILURE,
    TERMINAL,
    Execution,
    ExecutionStatus,
    Trigger,
    occurrence_execution_id,
    trigger_execution_id,
)
from jobledger.domain.policies import RetryPolicy

T0 = datetime(2026, 3, 8, 6, 30, tzinfo=UTC)


def make_execution(max_retries: int = 2, *, jitter: bool = False) -> Execution:
    spec = ExecutionSpec(
        handler="test.echo",
        retry=RetryPolicy(
            max_retries=max_retries,
            initial_backoff=timedelta(seconds=2),
            max_backoff=timedelta(seconds=30),
            jitter=jitter,
        ),
    )
    return Execution.enqueue(spec=spec, ready_at=T0, trigger=Trigger.ADHOC)


def status(execution: Execution) -> ExecutionStatus:
    # A call, so the type checker does not keep an earlier narrowing across commands.
    return execution.status


def lease(execution: Execution) -> uuid.UUID:
    lease_id = uuid.uuid4()
    execution.lease(worker_id="w1", lease_id=lease_id, lease_expires_at=T0 + timedelta(minutes=1))
    return lease_id


def test_completion_with_the_current_lease_completes() -> None:
    """If the worker holding the lease reports success, then the execution is completed."""
    execution = make_execution()
    lease_id = lease(execution)
    execution.complete(lease_id=lease_id, duration=timedelta(seconds=3), result={"ok": True})
    assert execution.status is ExecutionStatus.COMPLETED
    assert execution.attempts_used == 1


def test_a_stale_report_is_rejected_and_changes_nothing() -> None:
    """If a report carries a lease that is not current, then StaleLeaseError and no event."""
    execution = make_execution()
    old = lease(execution)
    execution.expire_lease(lease_id=old, at=T0)
    new = lease(execution)
    version = execution.version
    with pytest.raises(StaleLeaseError, match="not the current lease"):
        execution.complete(lease_id=old, duration=timedelta(0), result={})
    assert execution.version == version
    execution.complete(lease_id=new, duration=timedelta(0), result={})
    assert execution.status is ExecutionStatus.COMPLETED


def test_failures_retry_with_backoff_then_dead_letter() -> None:
    """If every attempt fails, then retries back off and the last one dead-letters."""
    execution = make_execution(max_retries=2)
    ready_times = []
    for _ in range(3):
        lease_id = lease(execution)
        execution.fail(lease_id=lease_id, error="boom", at=T0)
        ready_times.append(execution.ready_at)
    assert execution.status is ExecutionStatus.DEAD_LETTERED
    assert execution.attempts_used == 3
    assert ready_times[:2] == [T0 + timedelta(seconds=2), T0 + timedelta(seconds=4)]
    events = [type(e).__name__ for e in execution.collect_events()]
    assert events.count("Retried") == 2
    assert events[-1] == "DeadLettered"


def test_a_lease_expiry_counts_as_an_attempt() -> None:
    """If a job kills its worker every time, then lease expiries still end in the DLQ."""
    execution = make_execution(max_retries=1)
    for _ in range(2):
        execution.expire_lease(lease_id=lease(execution), at=T0)
    assert execution.status is ExecutionStatus.DEAD_LETTERED
    names = [type(e).__name__ for e in execution.collect_events()]
    assert names.count("LeaseExpired") == 2


def test_a_deferral_is_not_an_attempt() -> None:
    """If the circuit is open and the run is deferred, then no attempt is spent."""
    execution = make_execution(max_retries=0)
    for _ in range(5):
        execution.defer(lease_id=lease(execution), reason="circuit open", ready_at=T0)
    assert execution.status is ExecutionStatus.PENDING
    assert execution.attempts_used == 0
    lease_id = lease(execution)
    assert execution.lease_attempt == 1
    execution.complete(lease_id=lease_id, duration=timedelta(0), result={})


def test_requeue_from_the_dead_letter_queue_gives_a_new_budget() -> None:
    """If a dead-lettered execution is requeued, then it gets max_retries + 1 new attempts."""
    execution = make_execution(max_retries=0)
    execution.fail(lease_id=lease(execution), error="x", at=T0)
    assert status(execution) is ExecutionStatus.DEAD_LETTERED
    execution.requeue(by="alice", reason="fixed the endpoint", at=T0)
    assert status(execution) is ExecutionStatus.PENDING
    lease_id = lease(execution)
    assert execution.lease_attempt == 2
    execution.fail(lease_id=lease_id, error="x", at=T0)
    assert execution.status is ExecutionStatus.DEAD_LETTERED


@pytest.mark.parametrize("finish", ["complete", "cancel", "dead_letter"])
def test_no_transition_out_of_a_terminal_state(finish: str) -> None:
    """If an execution is completed, cancelled or dead-lettered, then lease and cancel fail."""
    execution = make_execution(max_retries=0)
    if finish == "cancel":
        execution.cancel(by="bob", reason="not needed")
    else:
        lease_id = lease(execution)
        if finish == "complete":
            execution.complete(lease_id=lease_id, duration=timedelta(0), result={})
        else:
            execution.fail(lease_id=lease_id, error="x", at=T0)
    with pytest.raises(InvalidTransitionError):
        lease(execution)
    with pytest.raises(InvalidTransitionError):
        execution.cancel(by="bob", reason="again")


def test_requeue_only_from_the_dead_letter_queue() -> None:
    """If an execution is not dead-lettered, then requeue is refused."""
    execution = make_execution()
    with pytest.raises(InvalidTransitionError, match="requeue"):
        execution.requeue(by="a", reason="b", at=T0)


def test_a_run_in_back_off_brought_forward_is_due_with_its_attempts_kept() -> None:
    """If a run that failed waits for its back-off and is brought forward, then it is
    due at that moment, its next lease is the attempt it waited for, and the budget
    it spent stays spent."""
    execution = make_execution(max_retries=1)
    execution.fail(lease_id=lease(execution), error="x", at=T0)
    assert execution.ready_at > T0
    execution.bring_forward(by="alice", reason="the API is back", at=T0)
    assert (execution.status, execution.ready_at) == (ExecutionStatus.PENDING, T0)
    lease_id = lease(execution)
    assert execution.lease_attempt == 2
    execution.fail(lease_id=lease_id, error="x", at=T0)
    assert execution.status is ExecutionStatus.DEAD_LETTERED


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("due", "due already"),  # nothing to bring forward
        ("running", "bring forward"),
        ("completed", "bring forward"),
    ],
)
def test_only_a_run_waiting_for_a_later_time_is_brought_forward(state: str, message: str) -> None:
    """If a run is due already, running or ended, then bringing it forward is refused
    naming why, and nothing is recorded."""
    execution = make_execution()
    if state != "due":
        lease_id = lease(execution)
        if state == "completed":
            execution.complete(lease_id=lease_id, duration=timedelta(0), result={})
    version = execution.version
    with pytest.raises(InvalidTransitionError, match=message):
        execution.bring_forward(by="alice", reason="now", at=T0)
    assert execution.version == version


def test_a_discarded_dead_letter_is_final() -> None:
    """If a dead letter is discarded, then it is terminal: no requeue, no lease, no cancel,
    and discarding anything that is not dead-lettered is refused."""
    execution = make_execution(max_retries=0)
    with pytest.raises(InvalidTransitionError, match="discard"):
        execution.discard(by="a", reason="b")
    execution.fail(lease_id=lease(execution), error="x", at=T0)
    execution.discard(by="alice", reason="obsolete")
    assert execution.status is ExecutionStatus.DISCARDED
    for refused in (
        lambda: execution.requeue(by="a", reason="b", at=T0),
        lambda: execution.discard(by="a", reason="b"),
        lambda: execution.cancel(by="a", reason="b"),
        lambda: lease(execution),
    ):
        with pytest.raises(InvalidTransitionError):
            refused()


def test_execution_ids_are_deterministic() -> None:
    """If two schedulers fire the same occurrence, then they derive the same execution id."""
    job_id = uuid.uuid4()
    berlin = datetime(2026, 3, 29, 8, 0, tzinfo=UTC)
    assert occurrence_execution_id(job_id, berlin) == occurrence_execution_id(job_id, berlin)
    assert occurrence_execution_id(job_id, berlin) != occurrence_execution_id(
        job_id, berlin + timedelta(minutes=1)
    )
    assert trigger_execution_id(job_id, "k") == trigger_execution_id(job_id, "k")
    assert trigger_execution_id(None, "k") != trigger_execution_id(job_id, "k")
    with pytest.raises(ValueError, match="zone-aware"):
        occurrence_execution_id(job_id, datetime(2026, 1, 1))  # noqa: DTZ001


class ExecutionMachine(RuleBasedStateMachine):
    """Random command sequences, including stale and out-of-order reports."""

    def __init__(self) -> None:
        super().__init__()
        self.execution = make_execution(max_retries=2, jitter=True)
        self.leases: list[uuid.UUID] = []
        self.terminal_seen: ExecutionStatus | None = None

    def _apply(self, command: Callable[[], None]) -> None:
        version = self.execution.version
        try:
            command()
        except (InvalidTransitionError, StaleLeaseError):
            assert self.execution.version == version, "a refused command must emit nothing"

    def _lease_id(self, data: st.DataObject) -> uuid.UUID:
        # Mostly the latest lease, sometimes an old one (a stale report), sometimes junk.
        choices = [*self.leases[-3:], uuid.uuid4()]
        return data.draw(st.sampled_from(choices))

    @rule()
    def lease(self) -> None:
        lease_id = uuid.uuid4()
        self.leases.append(lease_id)
        self._apply(
            lambda: self.execution.lease(
                worker_id="w", lease_id=lease_id, lease_expires_at=T0 + timedelta(minutes=1)
            )
        )

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        lease_id = self._lease_id(data)
        self._apply(
            lambda: self.execution.complete(lease_id=lease_id, duration=timedelta(1), result={})
        )

    @rule(data=st.data(), rand=st.floats(0, 1))
    def fail(self, data: st.DataObject, rand: float) -> None:
        lease_id = self._lease_id(data)
        self._apply(lambda: self.execution.fail(lease_id=lease_id, error="e", at=T0, rand=rand))

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        lease_id = self._lease_id(data)
        self._apply(lambda: self.execution.expire_lease(lease_id=lease_id, at=T0))

    @rule(data=st.data())
    def defer(self, data: st.DataObject) -> None:
        lease_id = self._lease_id(data)
        self._apply(lambda: self.execution.defer(lease_id=lease_id, reason="open", ready_at=T0))

    @rule(data=st.data(), seconds=st.floats(0, 3600))
    def snooze(self, data: st.DataObject, seconds: float) -> None:
        lease_id, delay = self._lease_id(data), timedelta(seconds=seconds)
        self._apply(
            lambda: self.execution.snooze(lease_id=lease_id, reason="later", delay=delay, at=T0)
        )

    @rule(data=st.data())
    def fail_permanently(self, data: st.DataObject) -> None:
        lease_id = self._lease_id(data)
        self._apply(lambda: self.execution.fail_permanently(lease_id=lease_id, error="bad"))

    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        lease_id = self._lease_id(data)
        self._apply(lambda: self.execution.drop(lease_id=lease_id, reason="obsolete"))

    @rule()
    def cancel(self) -> None:
        self._apply(lambda: self.execution.cancel(by="op", reason="r"))

    @rule()
    def discard(self) -> None:
        self._apply(lambda: self.execution.discard(by="op", reason="r"))

    @rule()
    def requeue(self) -> None:
        self._apply(lambda: self.execution.requeue(by="op", reason="r", at=T0))

    @invariant()
    def attempts_within_budget(self) -> None:
        assert 0 <= self.execution.attempts_in_budget <= self.execution.spec.retry.max_attempts

    @invariant()
    def reports_only_apply_to_the_current_lease(self) -> None:
        running = self.execution.status is ExecutionStatus.RUNNING
        assert (self.execution.lease_id is not None) == running

    @invariant()
    def terminal_states_are_final(self) -> None:
        status = self.execution.status
        if self.terminal_seen is not None and self.terminal_seen is not status:
            # The only ways out of a terminal state lead from the dead-letter queue: a
            # requeue, or a discard (which is final).
            assert self.terminal_seen is ExecutionStatus.DEAD_LETTERED
            assert status in {ExecutionStatus.PENDING, ExecutionStatus.DISCARDED}
        self.terminal_seen = status if status in TERMINAL else None

    @invariant()
    def events_replay_to_the_same_state(self) -> None:
        pending = list(self.execution.pending_events)
        replayed: Execution | None = None
        for domain_event in pending:
            replayed = typing.cast("Execution | None", domain_event.mutate(replayed))
        assert replayed is not None
        assert replayed.status is self.execution.status
        assert replayed.attempts_used == self.execution.attempts_used


TestExecutionMachine = ExecutionMachine.TestCase


def test_the_enqueued_event_alone_makes_the_run_enqueue_makes() -> None:
    """If a bulk path records only ``Execution.enqueued``, then that event, applied,
    gives the run ``Execution.enqueue`` gives, with the same id, fields and stored
    fields, and the limit keys resolved from the payload."""
    from jobledger.domain.limits import ConcurrencyLimit, RunLimits  # noqa: PLC0415 (here only)
    from jobledger.persistence.codec import MsgspecMapper  # noqa: PLC0415 (here only)

    limits = RunLimits(concurrency=ConcurrencyLimit(key="c:{payload.c}", max=1))
    spec = ExecutionSpec(handler="test.echo", payload={"c": 7}, limits=limits)
    made = Execution.enqueue(spec=spec, ready_at=T0, trigger=Trigger.ADHOC, trigger_key="k-1")
    event = Execution.enqueued(spec=spec, ready_at=T0, trigger=Trigger.ADHOC, trigger_key="k-1")
    # The event's own typing names the base aggregate; it makes an Execution.
    applied = typing.cast("Execution", event.mutate(None))
    assert type(applied) is Execution
    ignored = {"_created_on", "_modified_on", "_pending_events"}

    def shown(run: Execution) -> dict[str, object]:
        return {k: v for k, v in vars(run).items() if k not in ignored}

    assert shown(applied) == shown(made)
    assert applied.spec.limits is not None
    assert applied.spec.limits.concurrency == ConcurrencyLimit(key="c:7", max=1)
    mapper = MsgspecMapper()
    (original,) = made.collect_events()
    assert mapper.to_stored_event(event).topic == mapper.to_stored_event(original).topic
    decoded = mapper.to_domain_event(mapper.to_stored_event(event))
    assert isinstance(decoded, Execution.Enqueued)
    assert decoded.spec == typing.cast("Execution.Enqueued", original).spec


def _every_command(execution: Execution) -> None:
    """Commands that trigger each kind of event a worker or an operator records."""
    execution.throttle(kind="concurrency", limit="c:1", at=T0)
    execution.defer(lease_id=lease(execution), reason="breaker open", ready_at=T0)
    execution.fail(lease_id=lease(execution), error="boom", at=T0)
    execution.expire_lease(lease_id=lease(execution), at=T0)
    execution.requeue(by="ops", reason="again", at=T0)
    execution.complete(lease_id=lease(execution), duration=timedelta(seconds=1), result={"n": 1})


def test_every_commands_events_stored_and_read_back_replay_to_the_same_run() -> None:
    """If a run's events are stored and read back, then they replay to the run the
    commands left, attribute for attribute."""
    from jobledger.persistence.codec import MsgspecMapper  # noqa: PLC0415 (here only)

    execution = make_execution(max_retries=1)
    _every_command(execution)
    events = execution.collect_events()
    assert {type(e).__name__ for e in events} >= {
        "Throttled", "Leased", "Deferred", "Retried", "LeaseExpired", "DeadLettered",
        "Requeued", "Completed",
    }  # fmt: skip
    mapper = MsgspecMapper()
    replayed: Execution | None = None
    for made in events:
        decoded: typing.Any = mapper.to_domain_event(mapper.to_stored_event(made))
        replayed = decoded.mutate(replayed)
    assert execution.status is ExecutionStatus.COMPLETED
    assert vars(replayed) == {**vars(execution), "_pending_events": []}


# ---- what a handler decides besides pass or fail ------------------------------------


@given(snoozes=st.integers(1, 20), max_retries=st.integers(0, 3))
def test_a_snooze_never_spends_an_attempt(snoozes: int, max_retries: int) -> None:
    """If a handler snoozes its run any number of times, then no attempt is spent: the
    run is pending at the snooze's end, and the next lease is attempt 1 again."""
    execution = make_execution(max_retries=max_retries)
    for _ in range(snoozes):
        execution.snooze(
            lease_id=lease(execution), reason="not yet", delay=timedelta(seconds=30), at=T0
        )
        assert status(execution) is ExecutionStatus.PENDING
        assert execution.ready_at == T0 + timedelta(seconds=30)
        assert execution.attempts_used == 0
    lease(execution)
    assert execution.lease_attempt == 1
    names = [type(e).__name__ for e in execution.collect_events()]
    assert names.count("Snoozed") == snoozes


@pytest.mark.parametrize("seconds", [-1.0, MAX_SNOOZE.total_seconds() + 1])
def test_a_snooze_out_of_range_is_refused(seconds: float) -> None:
    """If a snooze is negative or longer than MAX_SNOOZE, then it is refused naming
    ``seconds`` and the run is left running."""
    execution = make_execution()
    lease_id = lease(execution)
    with pytest.raises(InvalidDefinitionError, match="seconds"):
        execution.snooze(lease_id=lease_id, reason="x", delay=timedelta(seconds=seconds), at=T0)
    assert status(execution) is ExecutionStatus.RUNNING


def test_a_permanent_failure_dead_letters_with_attempts_left() -> None:
    """If a handler fails permanently on its first of three attempts, then the run is
    dead-lettered at once, its error says so, and one attempt is counted; a requeue
    still gives it a fresh budget."""
    execution = make_execution(max_retries=2)
    execution.fail_permanently(lease_id=lease(execution), error="no such customer")
    assert status(execution) is ExecutionStatus.DEAD_LETTERED
    assert execution.attempts_used == 1
    assert execution.last_error == PERMANENT_FAILURE + "no such customer"
    dead = execution.collect_events()[-1]
    assert isinstance(dead, Execution.DeadLettered)
    assert dead.permanent
    execution.requeue(by="ops", reason="customer restored", at=T0)
    lease(execution)
    assert execution.lease_attempt == 2


def test_a_handler_discard_ends_the_run_with_its_reason() -> None:
    """If a handler discards its run, then the run is discarded (terminal) by the
    handler, with its reason, the attempt counted and no retry left pending."""
    execution = make_execution(max_retries=3)
    lease_id = lease(execution)
    execution.drop(lease_id=lease_id, reason="order was cancelled upstream")
    assert status(execution) is ExecutionStatus.DISCARDED
    assert execution.attempts_used == 1
    assert execution.lease_id is None
    discarded = execution.collect_events()[-1]
    assert isinstance(discarded, Execution.Discarded)
    assert (discarded.by, discarded.reason, discarded.lease_id) == (
        BY_HANDLER,
        "order was cancelled upstream",
        lease_id,
    )
    with pytest.raises(InvalidTransitionError):
        execution.requeue(by="ops", reason="again", at=T0)


@pytest.mark.parametrize("outcome", ["snooze", "fail_permanently", "drop"])
def test_a_stale_handler_outcome_is_rejected(outcome: str) -> None:
    """If a snooze, a permanent failure or a discard carries a lease that is no longer
    current, then StaleLeaseError and nothing is recorded."""
    execution = make_execution()
    old = lease(execution)
    execution.expire_lease(lease_id=old, at=T0)
    lease(execution)
    version = execution.version
    commands: dict[str, Callable[[], None]] = {
        "snooze": lambda: execution.snooze(lease_id=old, reason="x", delay=timedelta(0), at=T0),
        "fail_permanently": lambda: execution.fail_permanently(lease_id=old, error="x"),
        "drop": lambda: execution.drop(lease_id=old, reason="x"),
    }
    with pytest.raises(StaleLeaseError):
        commands[outcome]()
    assert execution.version == version


def _expiring(expires_at: datetime) -> Execution:
    spec = ExecutionSpec(handler="test.echo", expires_at=expires_at)
    return Execution.enqueue(spec=spec, ready_at=T0, trigger=Trigger.ADHOC)


@given(offset=st.integers(-3600, 3600))
def test_a_run_expires_only_once_its_deadline_passed(offset: int) -> None:
    """If a pending run's expires_at has passed, then it can be expired (discarded with
    an Expired event naming the deadline); before it, expiring is refused."""
    deadline = T0 + timedelta(minutes=5)
    at = deadline + timedelta(seconds=offset)
    execution = _expiring(deadline)
    assert execution.expired_by(at) == (offset >= 0)
    if offset < 0:
        with pytest.raises(InvalidTransitionError, match="not expired"):
            execution.expire(at=at)
        return
    execution.expire(at=at)
    assert status(execution) is ExecutionStatus.DISCARDED
    expired = execution.collect_events()[-1]
    assert isinstance(expired, Execution.Expired)
    assert expired.expires_at == deadline
    assert execution.last_error is not None
    assert deadline.isoformat() in execution.last_error


def test_a_leased_run_no_longer_expires() -> None:
    """If a run was leased before its expires_at, then the deadline no longer applies."""
    execution = _expiring(T0 + timedelta(minutes=5))
    lease(execution)
    later = T0 + timedelta(hours=1)
    assert not execution.expired_by(later)
    with pytest.raises(InvalidTransitionError):
        execution.expire(at=later)


@pytest.mark.parametrize("expires_at", [T0, T0 - timedelta(seconds=1)])
def test_an_expiry_not_after_the_start_is_refused(expires_at: datetime) -> None:
    """If expires_at is not after the run is due, then enqueueing it is refused naming
    expires_at (it could never run)."""
    spec = ExecutionSpec(handler="test.echo", expires_at=expires_at)
    with pytest.raises(InvalidDefinitionError, match="expires_at"):
        Execution.enqueue(spec=spec, ready_at=T0, trigger=Trigger.ADHOC)
    with pytest.raises(InvalidDefinitionError, match="expires_at"):
        Execution.enqueued(spec=spec, ready_at=T0, trigger=Trigger.ADHOC)


def test_old_discarded_and_dead_lettered_events_still_decode() -> None:
    """If a Discarded or DeadLettered event was stored before lease_id and permanent
    existed, then it decodes and replays, with None and False for them."""
    from jobledger.persistence.codec import MsgspecMapper  # noqa: PLC0415 (here only)

    execution = make_execution(max_retries=0)
    execution.fail(lease_id=lease(execution), error="x", at=T0)
    execution.discard(by="ops", reason="obsolete")
    mapper = MsgspecMapper()
    replayed: typing.Any = None
    for made in execution.collect_events():
        stored = mapper.to_stored_event(made)
        state = msgspec.json.decode(stored.state)
        new_fields: dict[type, str] = {
            Execution.Discarded: "lease_id",
            Execution.DeadLettered: "permanent",
        }
        state.pop(new_fields.get(type(made), ""), None)
        old = dataclasses.replace(stored, state=msgspec.json.encode(state))
        decoded: typing.Any = mapper.to_domain_event(old)
        replayed = decoded.mutate(replayed)
    assert replayed.status is ExecutionStatus.DISCARDED
