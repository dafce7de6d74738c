"""Rows of the read models as the lists and details show them, and a page of them.

Every datetime is zone-aware UTC.
"""

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from jobledger.schemas.jobs import JobIn, ScheduleIn


class JobRow(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    name: str
    handler: str
    queue: str
    priority: int
    # The definition's schedule (as ``definition.schedule``), for a list to show.
    schedule: ScheduleIn | None
    status: str  # active, paused, deleted
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    last_execution_id: UUID | None
    last_status: str | None
    last_finished_at: datetime | None
    created_at: datetime | None  # None only where ``unreadable`` says why
    created_by: str
    updated_at: datetime | None
    updated_by: str | None
    version: int
    # The shape POST and PATCH take and GET answers; None only for a stored
    # definition this release cannot read.
    definition: JobIn | None
    source: str = "api"  # "code": `jobledger apply` manages it
    # The values the read model holds for this row but cannot show (a time outside the
    # supported range, JSON that does not decode), each shown as null; None for a
    # row that shows everything.
    unreadable: str | None = None


class ExecutionRow(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    job_id: UUID | None
    job_name: str | None
    handler: str
    queue: str
    priority: int
    trigger: str
    status: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime | None
    enqueued_at: datetime | None  # None only where ``unreadable`` says why
    ready_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    last_error: str | None
    duration_ms: float | None
    lateness_ms: float | None
    result: dict[str, Any] | None
    closed_by: str | None  # who requeued, cancelled or discarded it last
    closed_reason: str | None
    version: int
    # How far the current (or last) attempt got, as its handler reported it.
    progress: "ProgressRow | None" = None
    # What this row cannot show and why (as ``JobRow.unreadable``).
    unreadable: str | None = None
    # Who asked for the run and how they came ("session", "token:<name>", "cli",
    # "outbox"); None for a run the schedule or the system made. ``closed_via``: how
    # ``closed_by`` came.
    enqueued_by: str | None = None
    enqueued_via: str | None = None
    closed_via: str | None = None
    # Why a pending run waits, in words: what its last event said (a back-off, an open
    # breaker, a snooze, a limit) and what holds it now (a paused queue, no worker on
    # its queue); None for a run that is not pending.
    waiting: str | None = None


class ProgressRow(msgspec.Struct, frozen=True, kw_only=True):
    """A run's progress: a percentage (None: unknown), a message, small data, and when
    the handler reported it."""

    percent: float | None
    message: str
    data: dict[str, Any]
    at: datetime


class AttemptRow(msgspec.Struct, frozen=True, kw_only=True):
    execution_id: UUID
    attempt: int
    worker_id: str
    lease_id: UUID | None
    started_at: datetime | None  # None only where ``unreadable`` says why
    finished_at: datetime | None
    # completed, retried, dead_lettered, lease_expired, deferred, cancelled; None while
    # the lease is open.
    outcome: str | None
    error: str | None
    duration_ms: float | None
    # What this row cannot show and why (as ``JobRow.unreadable``).
    unreadable: str | None = None


class LogLineRow(msgspec.Struct, frozen=True, kw_only=True):
    """A line a run's handler logged in one of its attempts (ADR 104)."""

    attempt: int
    at: datetime
    level: str  # debug, info, warning, error or critical
    message: str
    fields: dict[str, Any]


class RunCell(msgspec.Struct, frozen=True, kw_only=True):
    """One run of a job as its history strip shows it: a cell coloured by its status."""

    id: UUID
    status: str
    enqueued_at: datetime | None


class DeadLetterGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Dead letters of one job (or ad-hoc handler) that ended with the same error."""

    job_id: UUID | None
    job_name: str | None
    handler: str
    error: str | None  # the last error, as every run of the group has it
    count: int
    first_seen: datetime | None  # when the first of them died
    last_seen: datetime | None


class StepCounts(msgspec.Struct, frozen=True, kw_only=True):
    """How many of a workflow's steps are in each state (``total`` is all of them)."""

    total: int
    waiting: int
    released: int  # its run is pending or running
    completed: int
    failed: int
    cancelled: int
    skipped: int


class WorkflowRow(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow as its list shows it; ``GET /api/v1/workflows/{id}`` has its steps."""

    id: UUID
    name: str
    status: str  # running, completed, failed, cancelled
    on_failure: str  # stop, continue
    step_counts: StepCounts
    started_at: datetime | None  # None only where ``unreadable`` says why
    updated_at: datetime | None  # its latest event
    ended_at: datetime | None  # when it completed, failed or was cancelled
    started_by: str | None  # None only where ``unreadable`` says why
    started_via: str | None  # how ``started_by`` came (as ``ExecutionRow.enqueued_via``)
    version: int
    # What this row cannot show and why (as ``JobRow.unreadable``).
    unreadable: str | None = None


class MinuteStats(msgspec.Struct, frozen=True, kw_only=True):
    minute: datetime
    fired: int  # executions enqueued (scheduled, manual and ad-hoc)
    completed: int
    failed: int  # failed attempts: retried plus dead-lettered
    dead_lettered: int
    lateness_p50_ms: float | None
    lateness_p95_ms: float | None
    lateness_p99_ms: float | None
    duration_p50_ms: float | None
    duration_p95_ms: float | None
    duration_p99_ms: float | None


class Page(msgspec.Struct, frozen=True, kw_only=True):
    items: list[Any]  # JobRow, ExecutionRow or WorkflowRow, as the function says
    total: int
    limit: int
    offset: int
    # Opaque: pass it as ``cursor`` for the page after this one; None on the last page.
    next_cursor: str | None = None
