"""Execution bodies: a run as the API takes it, what a run or a dead-letter action
answers, and one execution with its attempts."""

from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec

from jobledger.schemas.fields import AwareTime, Seconds, Short, Strict, Text, Tiny
from jobledger.schemas.jobs import ExecutionIn
from jobledger.schemas.rows import AttemptRow, ExecutionRow, LogLineRow


class UniqueIn(Strict):
    """At most one run per ``key`` (``{payload.field}`` takes a value of the payload)
    while the run holding it is in one of ``states`` and younger than
    ``period_seconds``; a duplicate gets that run (``return_existing``), swaps its
    payload (``replace``) or also moves its start to its own due time (``debounce``)."""

    key: Short
    period_seconds: Seconds = 300.0
    states: list[Literal["pending", "running", "completed", "dead_lettered"]] = msgspec.field(
        default_factory=lambda: ["pending", "running"]
    )
    on_conflict: Literal["return_existing", "replace", "debounce"] = "return_existing"


class TriggerIn(Strict):
    """A trigger's options: ``unique`` makes it one run per key (filled from the job's
    payload)."""

    unique: UniqueIn | None = None


class RunIn(ExecutionIn, kw_only=True):
    """An ad-hoc run: what to run, and when: now, at ``run_at``, or ``delay_seconds``
    from now (give one of the two at most); ``unique`` makes it one per key. A run not
    started by ``expires_at`` is discarded unrun (status ``discarded``)."""

    run_at: AwareTime | None = None
    delay_seconds: Seconds | None = None
    unique: UniqueIn | None = None
    expires_at: AwareTime | None = None


class ExecutionRef(msgspec.Struct):
    id: UUID
    status: str
    # True when another run held the request's unique key: this is that run.
    duplicate: bool = False
    # What the caller should know, e.g. that no worker serves the run's queue.
    warnings: list[str] = msgspec.field(default_factory=list)


# The most runs one batch may carry: one transaction, a request body of a few MB.
MAX_BATCH_RUNS = 1000


class BatchRunIn(RunIn, kw_only=True):
    """A run of a batch; ``key`` is its idempotency key (default: the batch's
    Idempotency-Key and the run's index)."""

    key: Short | None = None


class RunBatchIn(Strict):
    """Up to 1,000 ad-hoc runs enqueued in one transaction: all of them or none."""

    runs: Annotated[list[BatchRunIn], msgspec.Meta(min_length=1, max_length=MAX_BATCH_RUNS)]


class RunBatchOut(msgspec.Struct):
    """The runs of a batch in its order; ``created`` are new, ``existing`` were
    enqueued before under the same keys (the batch sent again)."""

    created: int
    existing: int
    executions: list[ExecutionRef]
    # One per queue of the batch that no worker serves (see ExecutionRef.warnings).
    warnings: list[str] = msgspec.field(default_factory=list)


class BulkRequeueIn(Strict):
    """Which dead letters to requeue; empty filters match all of them."""

    queue: Tiny | None = None
    handler: Short | None = None
    job_id: UUID | None = None
    error_contains: Text | None = None
    search: Short | None = None
    reason: Text = ""
    dry_run: bool = False


class BulkDiscardIn(BulkRequeueIn):
    """Which dead letters to give up on for good; empty filters match all of them."""


class BulkRunsIn(Strict):
    """Which runs a bulk action covers: the ``ids`` named, or every run the filter
    matches (the executions list's filters), one of the two; ``dry_run`` only counts."""

    ids: Annotated[list[UUID], msgspec.Meta(max_length=1000)] = msgspec.field(default_factory=list)
    status: Tiny | None = None
    job_id: UUID | None = None
    queue: Tiny | None = None
    handler: Short | None = None
    since: AwareTime | None = None
    until: AwareTime | None = None
    search: Short | None = None
    reason: Text = ""
    dry_run: bool = False


class BulkReport(msgspec.Struct):
    """What a bulk action did: ``changed`` (requeued, discarded, cancelled, brought
    forward); ``refused`` were no longer in a state it applies to when it came to them
    (no longer dead-lettered, ended, due already)."""

    matched: int
    changed: int
    refused: int
    dry_run: bool


class ExecutionDetail(msgspec.Struct):
    execution: ExecutionRow
    attempts: list[AttemptRow]
    # The run's input as it was enqueued (or last replaced), read from the log (the read
    # models keep no payloads); None where the log cannot show it.
    payload: dict[str, Any] | None = None
    # The lines its handler logged, every attempt's, oldest first (ADR 104), and how
    # many each attempt's bound left out.
    logs: list[LogLineRow] = msgspec.field(default_factory=list)
    logs_dropped: int = 0
