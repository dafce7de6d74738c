"""Execution bodies: a run as the API takes it, what a run or a dead-letter action
answers, and one execution with its attempts."""

from uuid import UUID

import msgspec

from jobledger.schemas.fields import AwareTime, Seconds, Short, Strict, Text, Tiny
from jobledger.schemas.jobs import ExecutionIn
from jobledger.schemas.rows import AttemptRow, ExecutionRow


class RunIn(ExecutionIn, kw_only=True):
    """An ad-hoc run: what to run, and when: now, at ``run_at``, or ``delay_seconds``
    from now (give one of the two at most)."""

    run_at: AwareTime | None = None
    delay_seconds: Seconds | None = None


class ExecutionRef(msgspec.Struct):
    id: UUID
    status: str


class BulkRequeueIn(Strict):
    """Which dead letters to requeue; empty filters match all of them."""

    queue: Tiny | None = None
    handler: Short | None = None
    job_id: UUID | None = None
    error_contains: Text | None = None
    reason: Text = ""
    dry_run: bool = False


class BulkReport(msgspec.Struct):
    """What an operation on dead letters did: ``changed`` requeued or discarded;
    ``refused`` were no longer dead-lettered when it came to them."""

    matched: int
    changed: int
    refused: int
    dry_run: bool


class ExecutionDetail(msgspec.Struct):
    execution: ExecutionRow
    attempts: list[AttemptRow]
