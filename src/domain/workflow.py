"""The Workflow aggregate: an ad-hoc DAG of steps, each a run of a handler.

A workflow is started with its steps, each naming the steps it runs ``after``; the
steps that wait for nothing are released at once. When a step's run ends, the workflow
records it (``StepFinished``, with the run's result) and releases every step whose
``after`` steps all completed: its run sees their results (``upstream_results``, by
step name). Each step's run has an id derived from the workflow and the step's name,
so a step can be released once only, however often its release is attempted.

A step whose run fails (dead-lettered, discarded or cancelled) fails the workflow:

- ``on_failure: stop`` releases no further step: the waiting ones are skipped, and the
  workflow is failed at once (runs already released go on and are recorded);
- ``continue`` skips only the steps that depend on the failed one (directly or not);
  the others go on, and the workflow is failed once every step has ended.

A workflow whose steps all completed is completed. ``cancel`` ends it: the waiting steps
are skipped, and the caller cancels the runs still open (``open_steps``).
"""

import enum
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import msgspec
from eventsourcing.domain import Aggregate, event

from jobledger.domain.definitions import DEFAULT_LIMITS, ExecutionSpec, Limits
from jobledger.domain.dependencies import find_cycle
from jobledger.domain.errors import InvalidDefinitionError, InvalidTransitionError
from jobledger.domain.execution import Execution, Trigger, step_execution_id
from jobledger.domain.json_values import check_actor, check_reason, check_text
from jobledger.domain.names import check_name
from jobledger.domain.policies import OnFailure

WORKFLOW_NAMESPACE: Final = uuid.UUID("a4f1b6d2-7c3e-4e9a-8f05-2b6d1c9e3a70")
MAX_STEPS: Final = 500
MAX_AFTER: Final = 50
_STEP_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


class StepStatus(enum.StrEnum):
    WAITING = "waiting"  # not released: a step it runs after has not completed
    RELEASED = "released"  # its run is pending or running
    COMPLETED = "completed"
    FAILED = "failed"  # dead-lettered or discarded
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # never released: a step it ran after failed, or the workflow ended


class WorkflowStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED_STEPS: Final = frozenset(
    {StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.SKIPPED}
)
# How a step's run ended, by the run's status (Execution statuses, by value).
_RUN_ENDINGS: Final = {
    "completed": StepStatus.COMPLETED,
    "dead_lettered": StepStatus.FAILED,
    "discarded": StepStatus.FAILED,
    "cancelled": StepStatus.CANCELLED,
}


def step_status_of(run_status: str) -> StepStatus | None:
    """The step's status once its run is in ``run_status`` (None: not ended yet)."""
    return _RUN_ENDINGS.get(run_status)


def workflow_id_for_key(key: str) -> uuid.UUID:
    return uuid.uuid5(WORKFLOW_NAMESPACE, key)


class StepSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One step: its name, what its run runs, and the steps it waits for."""

    name: str
    spec: ExecutionSpec
    after: tuple[str, ...] = ()


def check_steps(steps: Sequence[StepSpec], limits: Limits = DEFAULT_LIMITS) -> None:
    """Names unique and well formed, ``after`` naming known steps, no cycle; each run's
    spec valid. Raises ``InvalidDefinitionError`` naming the step."""
    if not 1 <= len(steps) <= MAX_STEPS:
        raise InvalidDefinitionError(
            "steps", f"has {len(steps)} steps", f"give from 1 to {MAX_STEPS} steps"
        )
    names = [step.name for step in steps]
    for index, step in enumerate(steps):
        _check_step(step, index, names)
        try:
            step.spec.check(limits)
        except InvalidDefinitionError as error:
            raise InvalidDefinitionError(
                f"steps[{index}].{error.field}", error.problem, error.fix
            ) from None
    _check_acyclic(steps)


def _check_step(step: StepSpec, index: int, names: list[str]) -> None:
    where = f"steps[{index}]"
    if not _STEP_NAME.fullmatch(step.name):
        raise InvalidDefinitionError(
            f"{where}.name",
            f"{step.name!r} is not a step name",
            "use 1-64 letters, digits and . _ : - (starting with a letter or digit)",
        )
    if names.index(step.name) != index:
        raise InvalidDefinitionError(
            f"{where}.name", f"{step.name!r} names two steps", "give each step its own name"
        )
    if len(step.after) > MAX_AFTER:
        raise InvalidDefinitionError(
            f"{where}.after", f"names {len(step.after)} steps", f"name at most {MAX_AFTER}"
        )
    for upstream in step.after:
        if upstream not in names:
            raise InvalidDefinitionError(
                f"{where}.after",
                f"{upstream!r} is not a step of this workflow",
                "name steps that the workflow has",
            )
        if upstream == step.name:
            raise InvalidDefinitionError(
                f"{where}.after", "names the step itself", "a step cannot wait for itself"
            )


def _check_acyclic(steps: Sequence[StepSpec]) -> None:
    edges: dict[str, tuple[str, ...]] = {}
    for step in steps:
        path = find_cycle(edges, step.name, step.after)
        if path is not None:
            raise InvalidDefinitionError(
                "steps",
                f"the steps wait for each other in a cycle: {' -> '.join(path)}",
                "remove one of the after entries on that path",
            )
        edges[step.name] = step.after


class Workflow(Aggregate):
    """An ad-hoc DAG of steps (see the module docstring)."""

    TOPIC = "jobledger:Workflow"

    class Created(Aggregate.Created):
        # Never emitted (workflows begin with Started); see Job.Created.
        TOPIC = "jobledger:WorkflowCreated"

    class Started(Aggregate.Created):
        TOPIC = "jobledger:WorkflowStarted"
        name: str
        steps: tuple[StepSpec, ...]
        on_failure: OnFailure
        key: str | None
        by: str
        via: str | None = None  # how ``by`` came; None before it existed

    class StepReleased(Aggregate.Event):
        TOPIC = "jobledger:WorkflowStepReleased"
        step: str
        execution_id: uuid.UUID

    class StepFinished(Aggregate.Event):
        TOPIC = "jobledger:WorkflowStepFinished"
        step: str
        status: StepStatus
        result: dict[str, Any] | None
        error: str | None

    class StepsSkipped(Aggregate.Event):
        TOPIC = "jobledger:WorkflowStepsSkipped"
        steps: tuple[str, ...]
        because: str  # the step whose failure (or the cancel) skipped them

    class Completed(Aggregate.Event):
        TOPIC = "jobledger:WorkflowCompleted"

    class Failed(Aggregate.Event):
        TOPIC = "jobledger:WorkflowFailed"
        failed: tuple[str, ...]

    class Cancelled(Aggregate.Event):
        TOPIC = "jobledger:WorkflowCancelled"
        by: str
        reason: str
        open_steps: tuple[str, ...]
        via: str | None = None

    @event(Started)
    def __init__(
        self,
        *,
        name: str,
        steps: tuple[StepSpec, ...],
        on_failure: OnFailure,
        key: str | None,
        by: str,
        via: str | None = None,
    ) -> None:
        del by, via
        self.name = name
        self.key = key
        self.on_failure = on_failure
        self.steps: dict[str, StepSpec] = {step.name: step for step in steps}
        self.states: dict[str, StepStatus] = dict.fromkeys(self.steps, StepStatus.WAITING)
        self.results: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, str] = {}
        self.status = WorkflowStatus.RUNNING

    @staticmethod
    def create_id(key: str | None) -> uuid.UUID:
        return workflow_id_for_key(key) if key else uuid.uuid4()

    # ---- commands ---------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        *,
        name: str,
        steps: Sequence[StepSpec],
        on_failure: OnFailure,
        at: datetime,
        by: str,
        key: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
        via: str | None = None,
    ) -> tuple["Workflow", list[Execution]]:
        """Start a workflow; returns it with the runs of the steps that wait for
        nothing, to be saved with it."""
        check_name(name)
        check_steps(steps, limits)
        check_actor(by)
        if key is not None:
            check_text(key, "key", max_chars=256)
        workflow = cls(
            name=name, steps=tuple(steps), on_failure=on_failure, key=key, by=by, via=via
        )
        return workflow, workflow._release_ready(at)

    def settle(
        self,
        step: str,
        *,
        status: StepStatus,
        result: dict[str, Any] | None,
        error: str | None,
        at: datetime,
    ) -> list[Execution]:
        """The run of ``step`` ended in ``status``: record it and release what it
        frees. Nothing for a step that is not released (a replay, or a stranger's run)."""
        if self.states.get(step) is not StepStatus.RELEASED or status not in ENDED_STEPS:
            return []
        self._step_finished(step=step, status=status, result=result, error=error)
        if self.status is not WorkflowStatus.RUNNING:
            return []
        if status is not StepStatus.COMPLETED:
            self._skip(self._skipped_by(step), because=step)
        released = self._release_ready(at) if self.status is WorkflowStatus.RUNNING else []
        self._end_if_done()
        return released

    def cancel(self, *, by: str, reason: str = "", via: str | None = None) -> list[str]:
        """End the workflow: waiting steps are skipped; returns the steps whose runs are
        still open, for the caller to cancel."""
        if self.status is not WorkflowStatus.RUNNING:
            raise InvalidTransitionError(f"workflow {self.id} is already {self.status}")
        check_reason(by, reason)
        open_steps = tuple(self.steps_in(StepStatus.RELEASED))
        self._cancelled(by=by, reason=reason, open_steps=open_steps, via=via)
        self._skip(self.steps_in(StepStatus.WAITING), because="cancel")
        return list(open_steps)

    # ---- queries ----------------------------------------------------------------------

    def steps_in(self, status: StepStatus) -> list[str]:
        return [name for name, state in self.states.items() if state is status]

    def execution_id(self, step: str) -> uuid.UUID:
        return step_execution_id(self.id, step)

    def downstream(self, step: str) -> list[str]:
        """The steps that wait for ``step``, directly or not, in step order."""
        waiters: dict[str, list[str]] = {name: [] for name in self.steps}
        for name, spec in self.steps.items():
            for upstream in spec.after:
                waiters[upstream].append(name)
        found: set[str] = set()
        pending = list(waiters.get(step, ()))
        while pending:
            name = pending.pop()
            if name not in found:
                found.add(name)
                pending.extend(waiters[name])
        return [name for name in self.steps if name in found]

    # ---- rules ------------------------------------------------------------------------

    def _ready(self) -> list[str]:
        completed = StepStatus.COMPLETED
        return [
            name
            for name in self.steps_in(StepStatus.WAITING)
            if all(self.states[up] is completed for up in self.steps[name].after)
        ]

    def _release_ready(self, at: datetime) -> list[Execution]:
        executions = []
        for name in self._ready():
            spec = self.steps[name]
            results = {up: self.results.get(up, {}) for up in spec.after}
            execution = Execution.enqueue(
                spec=spec.spec,
                ready_at=at,
                trigger=Trigger.WORKFLOW,
                upstream_results=results,
                workflow_id=self.id,
                step=name,
            )
            self._step_released(step=name, execution_id=execution.id)
            executions.append(execution)
        return executions

    def _skipped_by(self, failed: str) -> list[str]:
        if self.on_failure is OnFailure.STOP:
            return self.steps_in(StepStatus.WAITING)
        waiting = set(self.steps_in(StepStatus.WAITING))
        return [name for name in self.downstream(failed) if name in waiting]

    def _skip(self, steps: Sequence[str], *, because: str) -> None:
        if steps:
            self._steps_skipped(steps=tuple(steps), because=because)

    def _end_if_done(self) -> None:
        failed = tuple(
            name
            for name, state in self.states.items()
            if state in {StepStatus.FAILED, StepStatus.CANCELLED}
        )
        if failed and self.on_failure is OnFailure.STOP:
            self._failed(failed=failed)
        elif all(state in ENDED_STEPS for state in self.states.values()):
            if failed:
                self._failed(failed=failed)
            else:
                self._completed()

    # ---- event application ------------------------------------------------------------

    @event(StepReleased)
    def _step_released(self, *, step: str, execution_id: uuid.UUID) -> None:
        del execution_id
        self.states[step] = StepStatus.RELEASED

    @event(StepFinished)
    def _step_finished(
        self,
        *,
        step: str,
        status: StepStatus,
        result: dict[str, Any] | None,
        error: str | None,
    ) -> None:
        self.states[step] = status
        if result is not None:
            self.results[step] = result
        if error is not None:
            self.errors[step] = error

    @event(StepsSkipped)
    def _steps_skipped(self, *, steps: tuple[str, ...], because: str) -> None:
        del because
        for step in steps:
            self.states[step] = StepStatus.SKIPPED

    @event(Completed)
    def _completed(self) -> None:
        self.status = WorkflowStatus.COMPLETED

    @event(Failed)
    def _failed(self, *, failed: tuple[str, ...]) -> None:
        del failed
        self.status = WorkflowStatus.FAILED

    @event(Cancelled)
    def _cancelled(
        self, *, by: str, reason: str, open_steps: tuple[str, ...], via: str | None = None
    ) -> None:
        del by, reason, open_steps, via
        self.status = WorkflowStatus.CANCELLED


def upstream_of(steps: Mapping[str, StepSpec]) -> dict[str, tuple[str, ...]]:
    """Each step's ``after``, by step name (for drawing the DAG)."""
    return {name: spec.after for name, spec in steps.items()}
