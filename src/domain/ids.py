"""Ids derived from what a client knows, so a repeated request names the same thing:
pure functions of uuid, shared by the aggregates and by clients that need to know an
id before the server answers (an enqueue inside the caller's own transaction)."""

import hashlib
import os
import uuid

# Namespace for executions that belong to no job (ad-hoc runs by idempotency key).
ADHOC_NAMESPACE = uuid.UUID("5b0a6f2e-3f0c-4f0e-9d55-6a3b1c7e2a10")


_VARIANT_AND_VERSION_MASK = ~((0xC000 << 48) | (0xF000 << 64))
_RFC_4122_VERSION_5 = (0x8000 << 48) | (5 << 76)
_RFC_4122_VERSION_4 = (0x8000 << 48) | (4 << 76)


def name_uuid(namespace: uuid.UUID, name: str) -> uuid.UUID:
    """``uuid.uuid5(namespace, name)``, made without ``UUID.__init__``'s checks: a batch
    of runs or a tick of fires derives one per run, and that constructor took a fifth
    of a batch's time."""
    digest = hashlib.sha1(namespace.bytes + name.encode(), usedforsecurity=False).digest()
    return _made(int.from_bytes(digest[:16]) & _VARIANT_AND_VERSION_MASK | _RFC_4122_VERSION_5)


def random_uuid() -> uuid.UUID:
    """``uuid.uuid4()``, made without ``UUID.__init__``'s checks: a worker draws one
    for every lease."""
    value = int.from_bytes(os.urandom(16)) & _VARIANT_AND_VERSION_MASK | _RFC_4122_VERSION_4
    return _made(value)


# UUID's slots, set through their descriptors: ``object.__setattr__`` looks each one up
# again (half the cost of a made id).
_SET_INT = vars(uuid.UUID)["int"].__set__
_SET_IS_SAFE = vars(uuid.UUID)["is_safe"].__set__


def _made(value: int) -> uuid.UUID:
    made = object.__new__(uuid.UUID)
    _SET_INT(made, value)
    _SET_IS_SAFE(made, uuid.SafeUUID.unknown)
    return made


def trigger_execution_id(job_id: uuid.UUID | None, key: str) -> uuid.UUID:
    """The id of a manual or ad-hoc run, derived from its client key."""
    return name_uuid(job_id or ADHOC_NAMESPACE, "key:" + key)
