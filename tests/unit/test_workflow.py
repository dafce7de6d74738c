"""The Workflow aggregate as pure rules: releases, results, failure modes, cancel."""

import random
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import InvalidDefinitionError, InvalidTransitionError
from jobledger.domain.execution import Execution, step_execution_id
from jobledger.domain.policies import OnFailure
from jobledger.domain.workflow import StepSpec, StepStatus, Workflow, WorkflowStatus

AT = datetime(2026, 12, 1, tzinfo=UTC)
SPEC = ExecutionSpec(handler="test.echo")


def step(name: str, *after: str) -> StepSpec:
    return StepSpec(name=name, spec=SPEC, after=after)


def diamond() -> list[StepSpec]:
    return [step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")]


def start(
    steps: list[StepSpec], on_failure: OnFailure = OnFailure.STOP
) -> tuple[Workflow, list[Execution]]:
    return Workflow.start(name="wf", steps=steps, on_failure=on_failure, at=AT, by="t")


def complete(workflow: Workflow, name: str) -> list[Execution]:
    return workflow.settle(
        name, status=StepStatus.COMPLETED, result={"step": name}, error=None, at=AT
    )


def test_a_diamond_runs_in_order_with_its_upstream_results() -> None:
    """If a diamond a -> (b, c) -> d runs, then a is released first, b and c after it,
    d after both with both results, and the workflow completes."""
    workflow, released = start(diamond())
    assert [e.step for e in released] == ["a"]
    assert released[0].id == step_execution_id(workflow.id, "a")
    assert sorted(e.step or "" for e in complete(workflow, "a")) == ["b", "c"]
    assert complete(workflow, "b") == []
    (last,) = complete(workflow, "c")
    assert last.step == "d"
    assert last.upstream_results == {"b": {"step": "b"}, "c": {"step": "c"}}
    assert complete(workflow, "d") == []
    assert workflow.status is WorkflowStatus.COMPLETED


def test_a_replayed_outcome_releases_nothing_twice() -> None:
    """If a step's outcome is settled twice, then the second time changes nothing."""
    workflow, _ = start(diamond())
    complete(workflow, "a")
    events = len(workflow.collect_events())
    assert complete(workflow, "a") == []
    assert workflow.collect_events() == []
    assert events > 0


def test_stop_skips_the_waiting_steps_and_fails_at_once() -> None:
    """If b fails under stop, then d is skipped, the workflow fails at once, and c (already
    released) is still recorded when it ends."""
    workflow, _ = start(diamond(), OnFailure.STOP)
    complete(workflow, "a")
    assert workflow.settle("b", status=StepStatus.FAILED, result=None, error="boom", at=AT) == []
    assert workflow.status is WorkflowStatus.FAILED
    assert workflow.states["d"] is StepStatus.SKIPPED
    assert complete(workflow, "c") == []
    assert workflow.states["c"] is StepStatus.COMPLETED


def test_continue_runs_the_independent_branch_then_fails() -> None:
    """If x fails under continue, then only what depends on x is skipped; the other branch
    runs to its end, and then the workflow fails."""
    steps = [step("x"), step("y"), step("after_x", "x"), step("after_y", "y")]
    workflow, released = start(steps, OnFailure.CONTINUE)
    assert sorted(e.step or "" for e in released) == ["x", "y"]
    workflow.settle("x", status=StepStatus.FAILED, result=None, error="boom", at=AT)
    assert workflow.states["after_x"] is StepStatus.SKIPPED
    running = workflow.status
    assert [e.step for e in complete(workflow, "y")] == ["after_y"]
    complete(workflow, "after_y")
    assert (running, workflow.status) == (WorkflowStatus.RUNNING, WorkflowStatus.FAILED)


def test_cancel_skips_waiting_steps_and_names_the_open_ones() -> None:
    """If a running workflow is cancelled, then its waiting steps are skipped and the
    open ones are returned for cancelling; a second cancel is refused."""
    workflow, _ = start(diamond())
    complete(workflow, "a")
    assert sorted(workflow.cancel(by="op", reason="enough")) == ["b", "c"]
    assert workflow.states["d"] is StepStatus.SKIPPED
    assert workflow.status is WorkflowStatus.CANCELLED
    with pytest.raises(InvalidTransitionError):
        workflow.cancel(by="op")


@pytest.mark.parametrize(
    ("steps", "field", "words"),
    [
        ([step("a", "b"), step("b", "a")], "steps", "b -> a -> b"),
        ([step("a"), step("a")], "steps[1].name", "two steps"),
        ([step("a", "zz")], "steps[0].after", "not a step"),
        ([step("a", "a")], "steps[0].after", "itself"),
        ([step("bad name!")], "steps[0].name", "not a step name"),
        ([], "steps", "0 steps"),
    ],
)
def test_bad_steps_are_refused_naming_the_field(
    steps: list[StepSpec], field: str, words: str
) -> None:
    """If the steps are malformed or wait in a cycle, then the start is refused naming
    the field (and the cycle's path)."""
    with pytest.raises(InvalidDefinitionError, match=words) as refused:
        start(steps)
    assert refused.value.field == field


@st.composite
def dags(draw: st.DrawFn) -> list[StepSpec]:
    """A random DAG of 2-50 steps: each step waits for some of the steps before it."""
    count = draw(st.integers(2, 50))
    steps = []
    for index in range(count):
        earlier = [f"s{i}" for i in range(index)]
        after = draw(st.lists(st.sampled_from(earlier), max_size=4, unique=True)) if earlier else []
        steps.append(step(f"s{index}", *after))
    return steps


@given(steps=dags(), seed=st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_any_dag_releases_every_step_once_after_its_upstreams(
    steps: list[StepSpec], seed: int
) -> None:
    """If a DAG's runs complete in any order, then every step is released exactly once,
    only after all its after-steps completed, with exactly their results."""
    workflow, open_runs = start(steps)
    released = [e.step or "" for e in open_runs]
    done: set[str] = set()
    shuffle = random.Random(seed)
    while open_runs:
        run = open_runs.pop(shuffle.randrange(len(open_runs)))
        assert run.step is not None
        done.add(run.step)
        for new in complete(workflow, run.step):
            assert new.step is not None
            after = workflow.steps[new.step].after
            assert set(after) <= done
            assert new.upstream_results == {name: {"step": name} for name in after}
            released.append(new.step)
            open_runs.append(new)
    assert sorted(released) == sorted(s.name for s in steps)
    assert workflow.status is WorkflowStatus.COMPLETED
