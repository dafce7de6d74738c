"""The workflows' read model: one row per workflow (``jobledger_rm_workflows``,
migration 0020), folded from the Workflow aggregate's events beside the jobs' and the
executions' rows, for the workflow lists of the API and the dashboard.

A row counts its steps in each state from the events alone, as the aggregate moves a
step: every step starts waiting; a release moves one from waiting to released, a finish
one from released to how its run ended, a skip each step it names from waiting to
skipped. ``updated_at_ms`` is the time of its latest event, ``ended_at_ms`` that of its
completion, failure or cancel. Like a job's row, a row keeps the version of the last
event folded into it, and an older or equal event changes nothing.
"""

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from jobledger.domain.topics import event_topics
from jobledger.domain.workflow import StepStatus, Workflow, WorkflowStatus
from jobledger.projections.database import Row
from jobledger.projections.times import to_ms

log = structlog.get_logger(__name__)

WORKFLOWS = "jobledger_rm_workflows"
WORKFLOW_TOPICS = event_topics(Workflow)
# The column counting the steps in each state.
STEP_COLUMNS = {
    StepStatus.WAITING: "steps_waiting",
    StepStatus.RELEASED: "steps_released",
    StepStatus.COMPLETED: "steps_completed",
    StepStatus.FAILED: "steps_failed",
    StepStatus.CANCELLED: "steps_cancelled",
    StepStatus.SKIPPED: "steps_skipped",
}
WORKFLOW_COLUMNS = (
    "id", "name", "status", "on_failure", "steps_total", *STEP_COLUMNS.values(),
    "started_at_ms", "updated_at_ms", "ended_at_ms", "started_by", "started_via", "version",
)  # fmt: skip


def _started_row(key: str, event: Workflow.Started) -> Row:
    at = to_ms(event.timestamp)
    row: Row = {
        "id": key,
        "name": event.name,
        "status": WorkflowStatus.RUNNING.value,
        "on_failure": str(event.on_failure),
        "steps_total": len(event.steps),
        **dict.fromkeys(STEP_COLUMNS.values(), 0),
        "started_at_ms": at,
        "updated_at_ms": at,
        "ended_at_ms": None,
        "started_by": event.by,
        "started_via": event.via,
        "version": event.originator_version,
    }
    row[STEP_COLUMNS[StepStatus.WAITING]] = len(event.steps)
    return row


def _move(row: Row, source: StepStatus, target: StepStatus, count: int = 1) -> None:
    row[STEP_COLUMNS[source]] -= count
    row[STEP_COLUMNS[target]] += count


def _released(row: Row, _event: Workflow.StepReleased) -> None:
    _move(row, StepStatus.WAITING, StepStatus.RELEASED)


def _finished(row: Row, event: Workflow.StepFinished) -> None:
    _move(row, StepStatus.RELEASED, StepStatus(event.status))


def _skipped(row: Row, event: Workflow.StepsSkipped) -> None:
    _move(row, StepStatus.WAITING, StepStatus.SKIPPED, len(event.steps))


def _ended(status: WorkflowStatus) -> Callable[[Row, Any], None]:
    def end(row: Row, event: Any) -> None:  # noqa: ANN401 (a workflow's last event)
        row.update(status=status.value, ended_at_ms=to_ms(event.timestamp))

    return end


_CHANGES: dict[type[Any], Callable[[Row, Any], None]] = {
    Workflow.StepReleased: _released,
    Workflow.StepFinished: _finished,
    Workflow.StepsSkipped: _skipped,
    Workflow.Completed: _ended(WorkflowStatus.COMPLETED),
    Workflow.Failed: _ended(WorkflowStatus.FAILED),
    Workflow.Cancelled: _ended(WorkflowStatus.CANCELLED),
}
WORKFLOW_EVENTS = frozenset({Workflow.Started, *_CHANGES})


def touched_workflows(events: Sequence[tuple[str, Any]]) -> set[str]:
    """The ids of the workflows whose rows ``events`` (with their ids) change."""
    return {key for key, event in events if type(event) in WORKFLOW_EVENTS}


class WorkflowRows:
    """The workflow rows of one fold: read before it, changed by it, written after."""

    def __init__(self, rows: dict[str, Row] | None = None) -> None:
        self.rows: dict[str, Row] = {} if rows is None else rows
        self.changed: set[str] = set()

    def apply(self, key: str, event: Any) -> None:  # noqa: ANN401 (a workflow event)
        """Fold ``event`` of the workflow whose id is ``key``."""
        row = self.rows.get(key)
        if row is not None and event.originator_version <= row["version"]:
            return  # folded before: a page applied again
        if isinstance(event, Workflow.Started):
            self.rows[key] = _started_row(key, event)
        elif row is None:
            # Started before the table existed: a rebuild of the read models shows it.
            log.warning(
                "read_models.unknown_workflow", workflow_id=key, version=event.originator_version
            )
            return
        else:
            _CHANGES[type(event)](row, event)
            row.update(version=event.originator_version, updated_at_ms=to_ms(event.timestamp))
        self.changed.add(key)
