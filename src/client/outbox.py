"""Enqueue a run inside the application's own PostgreSQL transaction: the run exists if
the transaction commits, and never if it rolls back (ADR "transactional enqueue").

The row goes into jobledger's outbox table with the caller's connection; a scheduler's
relay turns it into the run within moments of the commit. The application must use
jobledger's database (the table lives there) and a scheduler must run.
"""

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from jobledger.client.calls import Payload, RunOptions, run_body
from jobledger.declarations import HandlerDeclaration
from jobledger.domain.ids import trigger_execution_id
from jobledger.schemas.outbox import OUTBOX_CHANNEL, OUTBOX_INSERT

_NOTIFY = f"NOTIFY {OUTBOX_CHANNEL}"


class Connection(Protocol):
    """What is used of the caller's connection: a psycopg ``Connection`` (or a cursor)."""

    def execute(self, query: Any, params: Sequence[Any] | None = ..., /) -> Any: ...  # noqa: ANN401 (DB-API)


class AsyncConnection(Protocol):
    """The same of an async connection: a psycopg ``AsyncConnection`` (or a cursor)."""

    async def execute(self, query: Any, params: Sequence[Any] | None = ..., /) -> Any: ...  # noqa: ANN401 (DB-API)


def enqueue_in_transaction(
    connection: Connection,
    handler: str | HandlerDeclaration[..., Any],
    payload: Payload = None,
    *,
    idempotency_key: str | None = None,
    **options: Any,  # noqa: ANN401 (RunOptions: queue, priority, run_at, delay, ...)
) -> uuid.UUID:
    """Write a run of ``handler`` into the caller's open transaction on ``connection``,
    and return the id the run will have. Nothing is sent until the caller commits; a
    rollback leaves no run. ``options`` are those of ``Client.enqueue`` (``queue``,
    ``priority``, ``run_at``, ``delay``, ``timeout_seconds``, ``retry``); ``delay``
    counts from when the relay takes the row, moments after the commit. The same
    ``idempotency_key`` twice is one run. The server checks the run when it takes it:
    one it refuses (an unknown handler, a payload its struct refuses) is logged as
    ``outbox.refused`` and stays in the table with its error."""
    row, execution_id = _row(handler, payload, idempotency_key, RunOptions(**options))
    connection.execute(OUTBOX_INSERT, row)
    connection.execute(_NOTIFY)
    return execution_id


async def enqueue_in_transaction_async(
    connection: AsyncConnection,
    handler: str | HandlerDeclaration[..., Any],
    payload: Payload = None,
    *,
    idempotency_key: str | None = None,
    **options: Any,  # noqa: ANN401 (RunOptions, as enqueue_in_transaction takes them)
) -> uuid.UUID:
    """``enqueue_in_transaction`` on an async connection."""
    row, execution_id = _row(handler, payload, idempotency_key, RunOptions(**options))
    await connection.execute(OUTBOX_INSERT, row)
    await connection.execute(_NOTIFY)
    return execution_id


def _row(
    handler: str | HandlerDeclaration[..., Any],
    payload: Payload,
    idempotency_key: str | None,
    options: RunOptions,
) -> tuple[tuple[str, str], uuid.UUID]:
    """The outbox row of a run (its key and its body), and the id the run will have."""
    if options.run_at is not None and options.delay is not None:
        raise ValueError("run_at and delay: give one of them, not both")
    if options.unique is not None:
        raise ValueError("the outbox takes no unique runs: enqueue them with Client.enqueue")
    key = idempotency_key or uuid.uuid4().hex
    body = msgspec.json.encode(run_body(handler, payload, options)).decode()
    return (key, body), trigger_execution_id(None, key)
