"""A run's own log lines (ADR 104): what its handler logged, captured per attempt by a
worker process, recorded on the run's stream while it runs and with its outcome, and
shown with the run; run on PostgreSQL and Redis."""

import json
import time
from typing import TYPE_CHECKING, Any

from jobledger.bootstrap import build_services
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.run_logs import LogLine, LogPolicy
from jobledger.domain.topics import event_topics
from jobledger.projections.log.reader import QUEUE_EVENTS
from jobledger.projections.read_models.follower import TOPICS as READ_MODEL_TOPICS
from jobledger.runtime.releases import TOPICS as RELEASE_TOPICS
from jobledger.services.run_record import run_record

if TYPE_CHECKING:
    from tests.integration.conftest import Harness

BEARER = "sekrit-bearer-5678"


def logged(harness: "Harness", execution_id: Any) -> list[Execution.Logged]:
    return [e for e in harness.events(execution_id) if isinstance(e, Execution.Logged)]


def lines_of(events: list[Execution.Logged]) -> list[LogLine]:
    return [line for event in events for line in event.lines]


def test_lines_are_recorded_while_the_handler_runs_and_with_its_outcome(
    harness: "Harness",
) -> None:
    """If a handler logs through ctx.log and the standard logging, a line every 0.6 s,
    then its first lines are in the run's stream while it still runs, every line names
    attempt 1, in order, with secrets redacted, and the last lines come in the same save
    as the outcome, just before it."""
    message = f"calling with Authorization: Bearer {BEARER}"
    run = harness.run("test.log", message=message, times=4, seconds=0.6, logging=True)
    worker = harness.start_worker()
    deadline = time.monotonic() + 20
    while not logged(harness, run.id):
        assert time.monotonic() < deadline, "no lines recorded while it ran"
        time.sleep(0.05)
    assert harness.status(run.id) is ExecutionStatus.RUNNING
    harness.wait_for_all([run], ExecutionStatus.COMPLETED, timeout=20)
    worker.stop()
    events = harness.events(run.id)
    recorded = logged(harness, run.id)
    assert len(recorded) >= 2
    assert {e.attempt for e in recorded} == {1}
    assert type(events[-2]) is Execution.Logged
    assert type(events[-1]) is Execution.Completed
    lines = lines_of(recorded)
    mine = [line for line in lines if line.message == "handler.log"]
    assert [line.fields["line"] for line in mine] == [1, 2, 3, 4]
    assert {line.fields["message"] for line in mine} == {"calling with Authorization: Bearer ***"}
    assert all("execution_id" not in line.fields for line in mine)  # the same on every line
    standard = [line for line in lines if line.fields.get("logger") == "jobledger.test"]
    assert [(line.level, line.message) for line in standard] == [
        ("warning", f"calling with Authorization: Bearer ***, line {n}") for n in range(1, 5)
    ]
    assert BEARER not in repr(recorded)  # the input has it; the lines do not


def test_each_failed_attempt_ends_with_its_traceback(harness: "Harness") -> None:
    """If a handler raises in each of its two attempts, then each attempt's lines end with
    a warning 'handler.raised' whose traceback names the error, and the run's record
    shows them by attempt beside its input, as `dlq show` prints them."""
    run = harness.run("test.fail", retries=1, error="card declined")
    worker = harness.start_worker()
    harness.wait_for_all([run], ExecutionStatus.DEAD_LETTERED, timeout=30)
    worker.stop()
    record = run_record(harness.events(run.id))
    assert record.payload == {"error": "card declined"}
    raised = [line for line in record.logs if line.message == "handler.raised"]
    assert [line.attempt for line in raised] == [1, 2]
    for line in raised:
        assert line.level == "warning"
        assert "Traceback (most recent call last)" in line.fields["exception"]
        assert "HandlerError: card declined" in line.fields["exception"]
    shown = [
        json.dumps(e, default=str)
        for e in build_services(harness.container).dead_letters.show(run.id)
    ]
    assert sum('"message": "handler.raised"' in line for line in shown) == 2  # `dlq show`


def test_an_attempt_keeps_lines_up_to_its_bound_and_counts_the_rest(harness: "Harness") -> None:
    """If a handler logs more lines than an attempt keeps, then the stream holds exactly
    the bound's worth and counts the rest as dropped."""
    bound = LogPolicy().max_lines
    run = harness.run("test.log", message="chatty", times=bound + 25)
    worker = harness.start_worker()
    harness.wait_for_all([run], ExecutionStatus.COMPLETED, timeout=30)
    worker.stop()
    record = run_record(harness.events(run.id))
    assert (len(record.logs), record.dropped) == (bound, 25)


def test_no_follower_reads_a_runs_lines() -> None:
    """If a follower reads the log, then the lines' events are not among its topics: a
    chatty handler costs the projections nothing; the full list still names them."""
    topic = Execution.Logged.TOPIC
    assert topic not in {*QUEUE_EVENTS, *READ_MODEL_TOPICS, *RELEASE_TOPICS}
    assert topic not in event_topics(Execution)
    assert topic in event_topics(Execution, followed_only=False)
