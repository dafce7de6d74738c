"""Events written straight into the event store, as an older release, a restore or a
bug elsewhere could have written them: the API refuses such payloads at its boundary."""

import uuid

from eventsourcing.persistence import StoredEvent

from jobledger.persistence.ledger import Ledger

OLD_SHAPE = b'{"shape":"old"}'  # a state no event class of this release decodes


def write_undecodable(
    ledger: Ledger, topic: str, originator: uuid.UUID | None = None, version: int = 1
) -> uuid.UUID:
    """An event of ``topic`` (version ``version`` of ``originator``, a new stream if
    none) whose stored state no longer fits its class."""
    originator = originator or uuid.uuid4()
    stored = StoredEvent(
        originator_id=originator, originator_version=version, topic=topic, state=OLD_SHAPE
    )
    ledger.recorder.insert_events([stored])
    return originator
