"""Ids derived from what a client knows, so a repeated request names the same thing:
pure functions of uuid, shared by the aggregates and by clients that need to know an
id before the server answers (an enqueue inside the caller's own transaction)."""

import uuid

# Namespace for executions that belong to no job (ad-hoc runs by idempotency key).
ADHOC_NAMESPACE = uuid.UUID("5b0a6f2e-3f0c-4f0e-9d55-6a3b1c7e2a10")


def trigger_execution_id(job_id: uuid.UUID | None, key: str) -> uuid.UUID:
    """The id of a manual or ad-hoc run, derived from its client key."""
    return uuid.uuid5(job_id or ADHOC_NAMESPACE, "key:" + key)
