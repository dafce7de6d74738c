"""jobledger from Python: ``Client`` and ``AsyncClient`` over the REST API.

::

    from jobledger.client import Client

    with Client() as client:  # JOBLEDGER_URL and JOBLEDGER_TOKEN
        run = client.enqueue("billing.send_invoice", {"customer": "acme", "amount": 120})
        result = client.wait(run, timeout=60)
        flow = client.workflows.create({"steps": [
            {"name": "extract", "handler": "etl.extract"},
            {"name": "load", "handler": "etl.load", "after": ["extract"]},
        ]})
        client.workflows.wait(flow.id, timeout=600)

Results are the API's own msgspec structs (``jobledger.schemas``); refusals raise a
``JobledgerError`` subclass (``jobledger.client.errors``). ``enqueue_in_transaction``
(and ``enqueue_in_transaction_async``) writes a run into the application's own
PostgreSQL transaction instead. The client
needs httpx and msgspec only: it loads nothing of the server.
"""

from jobledger.client.async_client import AsyncClient
from jobledger.client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    ExecutionCancelledError,
    ExecutionFailedError,
    JobledgerError,
    NotFoundError,
    NotVisibleYetError,
    PermissionDeniedError,
    ServerError,
    TooManyRequestsError,
    UnavailableError,
    ValidationError,
    WaitTimedOutError,
    WorkflowFailedError,
    WorkflowTimedOutError,
)
from jobledger.client.outbox import enqueue_in_transaction, enqueue_in_transaction_async
from jobledger.client.sync_client import Client

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "ConnectionFailedError",
    "ExecutionCancelledError",
    "ExecutionFailedError",
    "JobledgerError",
    "NotFoundError",
    "NotVisibleYetError",
    "PermissionDeniedError",
    "ServerError",
    "TooManyRequestsError",
    "UnavailableError",
    "ValidationError",
    "WaitTimedOutError",
    "WorkflowFailedError",
    "WorkflowTimedOutError",
    "enqueue_in_transaction",
    "enqueue_in_transaction_async",
]
