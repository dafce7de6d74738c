"""The workflows' read-model rows as a fold of the Workflow aggregate's events (no I/O),
and how a list row writes their step counts."""

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.api.dashboard.presenters import step_counts
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.policies import OnFailure
from jobledger.domain.workflow import StepSpec, StepStatus, Workflow, WorkflowStatus
from jobledger.projections.read_models.workflows import STEP_COLUMNS, WorkflowRows
from jobledger.projections.times import to_ms
from jobledger.schemas.rows import StepCounts

AT = datetime(2026, 12, 1, tzinfo=UTC)
SPEC = ExecutionSpec(handler="test.echo")
# How a released step's run may end.
ENDINGS = (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED)


def diamond() -> list[StepSpec]:
    return [
        StepSpec(name="a", spec=SPEC),
        StepSpec(name="b", spec=SPEC, after=("a",)),
        StepSpec(name="c", spec=SPEC, after=("a",)),
        StepSpec(name="d", spec=SPEC, after=("b", "c")),
    ]


def started(on_failure: OnFailure = OnFailure.STOP) -> tuple[Workflow, list[Any]]:
    workflow, _runs = Workflow.start(
        name="nightly", steps=diamond(), on_failure=on_failure, at=AT, by="ada", via="session"
    )
    return workflow, list(workflow.collect_events())


def fold(events: list[Any]) -> dict[str, Any]:
    rows = WorkflowRows()
    for event in events:
        rows.apply(str(event.originator_id), event)
    [row] = rows.rows.values()
    return row


def counted(row: dict[str, Any]) -> Counter[str]:
    return Counter({status.value: row[column] for status, column in STEP_COLUMNS.items()})


def test_a_started_workflow_has_its_first_step_released_and_the_rest_waiting() -> None:
    """If a diamond workflow starts, then its row is running, counts 4 steps, 1 released
    and 3 waiting, names who started it and how they came, and has not ended."""
    workflow, events = started()
    row = fold(events)
    assert (row["id"], row["name"], row["status"]) == (str(workflow.id), "nightly", "running")
    assert (row["on_failure"], row["steps_total"]) == ("stop", 4)
    assert +counted(row) == Counter({"released": 1, "waiting": 3})
    assert (row["started_by"], row["started_via"], row["ended_at_ms"]) == ("ada", "session", None)
    assert row["version"] == workflow.version


@settings(max_examples=60, deadline=None)
@given(
    on_failure=st.sampled_from(list(OnFailure)),
    endings=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(ENDINGS)), max_size=8),
    cancel=st.booleans(),
)
def test_any_run_of_a_workflow_folds_into_the_counts_the_aggregate_has(
    on_failure: OnFailure, endings: list[tuple[int, StepStatus]], *, cancel: bool
) -> None:
    """If a workflow's released steps end in any order and way (and it may be cancelled
    on the way), then its row counts the steps in each state as the aggregate holds
    them, has the aggregate's status and version, has ended exactly when the aggregate
    has, and folding every event again changes nothing."""
    workflow, events = started(on_failure)
    moment = AT
    for index, status in endings:
        moment += timedelta(seconds=1)
        name = "abcd"[index]
        workflow.settle(name, status=status, result=None, error=None, at=moment)
        if cancel and name == "d" and workflow.status is WorkflowStatus.RUNNING:
            workflow.cancel(by="bob")
        events += workflow.collect_events()
    row = fold(events)
    assert +counted(row) == Counter(state.value for state in workflow.states.values())
    assert (row["status"], row["version"]) == (workflow.status.value, workflow.version)
    assert (row["ended_at_ms"] is None) == (workflow.status is WorkflowStatus.RUNNING)
    assert row["updated_at_ms"] == to_ms(events[-1].timestamp)
    again = WorkflowRows({row["id"]: dict(row)})
    for event in events:
        again.apply(row["id"], event)
    assert again.rows[row["id"]] == row
    assert not again.changed


def test_an_event_of_a_workflow_without_a_row_is_left_alone() -> None:
    """If a workflow's later events come without its start (it started before the table
    existed), then no row is made from them."""
    workflow, _events = started()
    workflow.cancel(by="bob", reason="not needed")
    rows = WorkflowRows()
    for event in workflow.collect_events():
        rows.apply(str(workflow.id), event)
    assert rows.rows == {}
    assert not rows.changed


def test_a_list_row_writes_the_completed_steps_first_and_leaves_out_empty_states() -> None:
    """If a row's steps are counted, then the page says how many of all completed and
    then each other state that holds a step, in a fixed order."""
    counts = StepCounts(
        total=5, waiting=1, released=0, completed=1, failed=1, cancelled=0, skipped=2
    )
    assert step_counts(counts) == "1 of 5 completed; 1 waiting, 1 failed, 2 skipped"
    done = StepCounts(total=3, waiting=0, released=0, completed=3, failed=0, cancelled=0, skipped=0)
    assert step_counts(done) == "3 of 3 completed"
