"""Enqueue a run inside the application's own PostgreSQL transaction: the run exists if
the transaction commits, and never if it rolls back (ADR "transactional enqueue").

The row goes into jobledger's outbox table with the caller's connection; a scheduler's
relay turns it into the run within moments of the commit. The application must use
jobledger's database (the table lives there) and a scheduler must run.
"""

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

import msgspec

from jobledger.client.calls import Payload, RunOptions, run_body
from jobledger.declarations import HandlerDeclaration
from jobledger.domain.ids import trigger_execution_id
from jobledger.domain.policies import DEFAULT_PRIORITY
from jobledger.schemas.jobs import RetryIn
from jobledger.schemas.outbox import OUTBOX_CHANNEL, OUTBOX_INSERT

_NOTIFY = f"NOTIFY {OUTBOX_CHANNEL}"


class Connection(Protocol):
    """What is used of the caller's connection: a psycopg ``Connection`` (or a cursor)."""

    def execute(self, query: Any, params: Sequence[Any] | None = ..., /) -> Any: ...  # noqa: ANN401 (DB-API)


def enqueue_in_transaction(
    connection: Connection,
    handler: str | HandlerDeclaration[..., Any],
    payload: Payload = None,
    *,
    queue: str = "default",
    priority: int = DEFAULT_PRIORITY,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    timeout_seconds: float | None = None,
    retry: RetryIn | None = None,
    idempotency_key: str | None = None,
) -> uuid.UUID:
    """Write a run of ``handler`` into the caller's open transaction on ``connection``,
    and return the id the run will have. Nothing is sent until the caller commits; a
    rollback leaves no run. ``delay`` counts from when the relay takes the row (moments
    after the commit). The same ``idempotency_key`` twice is one run. The server checks
    the run when it takes it: a run it refuses (an unknown handler, a payload its struct
    refuses) is logged as ``outbox.refused`` and stays in the table with its error."""
    key = idempotency_key or uuid.uuid4().hex
    options = RunOptions(queue, priority, run_at, delay, timeout_seconds, retry)
    body = msgspec.json.encode(run_body(handler, payload, options)).decode()
    connection.execute(OUTBOX_INSERT, (key, body))
    connection.execute(_NOTIFY)
    return trigger_execution_id(None, key)
