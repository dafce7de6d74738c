"""Ad-hoc executions in tests: their spec, and what the log says about them."""

import uuid
from datetime import timedelta
from typing import Any

from jobledger.bootstrap import Container
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.policies import RetryPolicy


def adhoc_spec(
    handler: str,
    payload: dict[str, Any],
    *,
    retries: int,
    backoff: timedelta,
    max_backoff: timedelta,
    timeout: timedelta = timedelta(seconds=30),
) -> ExecutionSpec:
    """A spec whose retries fall due exactly one backoff after a failure (no jitter),
    the backoff doubling up to ``max_backoff``."""
    retry = RetryPolicy(
        max_retries=retries, initial_backoff=backoff, max_backoff=max_backoff, jitter=False
    )
    return ExecutionSpec(handler=handler, payload=payload, retry=retry, timeout=timeout)


class LogReads:
    """An execution's state and history, read from ``container``'s log."""

    container: Container

    def execution(self, execution_id: uuid.UUID) -> Execution:
        return self.container.ledger.get_execution(execution_id)

    def status(self, execution_id: uuid.UUID) -> ExecutionStatus:
        return self.execution(execution_id).status

    def events(self, execution_id: uuid.UUID) -> list[Any]:
        return list(self.container.ledger.history(execution_id))
