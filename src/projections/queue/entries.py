"""Queue entries as bytes: the one encoding the checkpoint and the Redis queue share.

An entry is stored as a msgpack ``QueueItem``. The Redis queue keeps that blob in its
``item`` hash and the checkpoint keeps the same bytes in its ``item`` column, beside
the few fields a rebuild needs to place it (queue, version, state, priority, lease id
and score). So a rebuild from the checkpoint copies bytes: it builds no ``QueueItem``
and encodes nothing.
"""

from typing import TypeAlias

import msgspec

from jobledger.projections.queue.backend import QueueItem
from jobledger.projections.times import due_score

# (execution id, queue, version, state, priority, lease id, score, item): one open
# entry as the checkpoint holds it. ``state`` is a ``QueueState`` value, ``score`` the
# due score of ``at`` (see redis_keys), ``item`` the output of ``encode_item``. A tuple
# because a database driver hands rows over as tuples: nothing is built per entry.
EncodedEntry: TypeAlias = tuple[str, str, int, str, int, str | None, int, bytes]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(QueueItem)


def encode_item(item: QueueItem) -> bytes:
    return _encoder.encode(item)


def decode_item(data: bytes) -> QueueItem:
    return _decoder.decode(data)


def encode_entry(item: QueueItem) -> EncodedEntry:
    lease_id = None if item.lease_id is None else str(item.lease_id)
    return (
        str(item.execution_id),
        item.queue,
        item.version,
        item.state.value,
        item.priority,
        lease_id,
        due_score(item.at),
        encode_item(item),
    )
