"""The read models as the API, the dashboard and the CLI query them: lists with filters
and pages, one execution with its attempts, and the numbers behind the overview."""

from datetime import datetime
from typing import TypedDict, Unpack
from uuid import UUID

import msgspec

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.execution import ExecutionStatus
from jobledger.infra.presence import Presence
from jobledger.persistence.ledger import Ledger
from jobledger.projections.read_models.queries import (
    JOB_STATUSES,
    AttemptRow,
    DeadLetterGroup,
    ExecutionRow,
    JobRow,
    MinuteStats,
    Page,
    ReadModelQueries,
    RunCell,
    WorkflowRow,
)
from jobledger.schemas.executions import ExecutionDetail
from jobledger.services.bodies import from_definition
from jobledger.services.errors import InvalidCursorError, NotYetVisibleError
from jobledger.services.pages import cursor_checked
from jobledger.services.run_record import RunRecord, run_record
from jobledger.services.waiting import WaitingReasons

__all__ = [
    "JOB_STATUSES",
    "AttemptRow",
    "ExecutionDetail",
    "ExecutionRow",
    "JobRow",
    "MinuteStats",
    "Page",
    "Views",
    "WorkflowRow",
]


class Paging(TypedDict, total=False):
    limit: int
    offset: int
    cursor: str | None  # the next_cursor of the page before; offset must then be 0


class JobFilters(Paging, total=False):
    status: str | None
    handler: str | None
    queue: str | None
    search: str | None
    source: str | None


class ExecutionFilters(Paging, total=False):
    status: str | None
    job_id: UUID | None
    queue: str | None
    handler: str | None
    since: datetime | None
    until: datetime | None
    search: str | None


class WorkflowFilters(Paging, total=False):
    status: str | None
    name: str | None
    since: datetime | None
    until: datetime | None


class DeadLetterFilters(Paging, total=False):
    queue: str | None
    handler: str | None
    job_id: UUID | None
    error_contains: str | None
    search: str | None


def _check_paging(paging: Paging) -> None:
    if paging.get("cursor") is not None and paging.get("offset"):
        raise InvalidCursorError(
            "cursor and offset: give one of them, not both",
            field="cursor",
            fix="follow next_cursor from page to page, without an offset",
        )


class Views:
    """Queries of the read models (eventually consistent with the log; the ledger tells
    what the log has that they do not show yet)."""

    def __init__(
        self,
        queries: ReadModelQueries,
        ledger: Ledger,
        presence: Presence | None = None,
        now: Clock = utc_now,
        waiting: WaitingReasons | None = None,
    ) -> None:
        self._queries = queries
        self._ledger = ledger
        self._presence = presence
        self._now = now
        self._waiting = waiting

    def jobs(self, **filters: Unpack[JobFilters]) -> Page:
        """Jobs by name, ignoring case; each row's definition in the shape the API
        takes."""
        _check_paging(filters)
        with cursor_checked():
            return self._queries.list_jobs(present=from_definition, **filters)

    def executions(self, **filters: Unpack[ExecutionFilters]) -> Page:
        """Executions, the latest enqueued first; each pending one says why it waits."""
        _check_paging(filters)
        with cursor_checked():
            page = self._queries.list_executions(**filters)
        if self._waiting is None:
            return page
        return msgspec.structs.replace(page, items=self._waiting.explain(page.items))

    def dead_letters(self, **filters: Unpack[DeadLetterFilters]) -> Page:
        """Dead-lettered executions, the latest to die first."""
        _check_paging(filters)
        with cursor_checked():
            return self._queries.list_dead_letters(**filters)

    def workflows(self, **filters: Unpack[WorkflowFilters]) -> Page:
        """Workflows, the latest started first, each with its steps counted by state."""
        _check_paging(filters)
        with cursor_checked():
            return self._queries.list_workflows(**filters)

    def recent_runs(self, job_ids: list[UUID], *, per_job: int = 20) -> dict[UUID, list[RunCell]]:
        """Each job's latest runs, the latest first: the jobs' history strips."""
        return self._queries.recent_runs(job_ids, per_job=per_job)

    def dead_letter_groups(self, *, limit: int = 100) -> list[DeadLetterGroup]:
        """Dead letters grouped by job, handler and last error, the largest first."""
        return self._queries.dead_letter_groups(limit=limit)

    def execution(self, execution_id: UUID) -> ExecutionRow | None:
        """The execution's row; a running one with its latest live progress."""
        row = self._queries.get_execution(execution_id)
        if row is None:
            return None
        if self._waiting is not None:
            [row] = self._waiting.explain([row])
        return self._with_live_progress(row)

    def execution_detail(self, execution_id: UUID) -> ExecutionDetail:
        """The execution's row and its attempts."""
        row = self.execution(execution_id)
        if row is None:
            self._ledger.get_execution(execution_id)  # NotFoundError if it does not exist
            raise NotYetVisibleError(
                f"execution {execution_id} is not in the read model yet",
                fix="retry in a moment",
            )
        record = self.run_record(execution_id)
        attempts = self.attempts(execution_id)
        return ExecutionDetail(row, attempts, record.payload, record.logs, record.dropped)

    def run_record(self, execution_id: UUID) -> RunRecord:
        """The run's input and its handler's lines, from its stream in the log."""
        return run_record(self._ledger.history(execution_id))

    def _with_live_progress(self, row: ExecutionRow) -> ExecutionRow:
        """A running execution's progress as its worker showed it last (at most a second
        old), when that is newer than what the log recorded."""
        if self._presence is None or row.status != ExecutionStatus.RUNNING.value:
            return row
        live = self._presence.progress_of(row.id, now=self._now())
        if live is None or (row.progress is not None and row.progress.at >= live.at):
            return row
        return msgspec.structs.replace(row, progress=live)

    def statuses(self, execution_ids: list[UUID]) -> dict[UUID, tuple[str, int]]:
        """The status and version of each of these executions that the read model
        shows."""
        return self._queries.execution_statuses(execution_ids)

    def log_version(self, execution_id: UUID) -> int | None:
        """The version of the execution's latest event in the log (None: it has none
        there, e.g. archived): what the read model shows once it has caught up."""
        return self._ledger.version(execution_id)

    def attempts(self, execution_id: UUID) -> list[AttemptRow]:
        return self._queries.list_attempts(execution_id)

    def status_counts(self) -> dict[str, dict[str, int]]:
        return self._queries.status_counts()

    def minute_stats(self, *, since: datetime, until: datetime) -> list[MinuteStats]:
        return self._queries.minute_stats(since=since, until=until)
