"""Bulk loading of an empty Redis queue: commands packed once, one batch in flight.

A rebuild writes every open entry with four plain commands per batch and queue (HSET
of versions, items and states, ZADD per sorted set). What costs is the per-argument
Python work of a general client, and Redis waiting while the next batch is prepared,
so this module packs each command with hiredis straight from columns of values, and
sends a batch before it reads the replies of the one before: Redis executes batch k
while Python prepares batch k+1. On a Redis Cluster, each master gets a pipeline of
its own and the commands about its slots.
"""

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, cast

import hiredis
from redis.cluster import RedisCluster
from redis.connection import ConnectionPool
from redis.crc import key_slot

from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.keys import QueueKeys
from jobledger.projections.queue.backend import PRIORITIES, LimitCloser, QueueState, has_limits
from jobledger.projections.queue.entries import EncodedEntry, decode_item

_HSET = b"HSET"
_ZADD = b"ZADD"
_SADD = b"SADD"
_Arg = str | int | bytes


class _Connection(Protocol):
    """What this module uses of a redis-py connection (untyped in redis-py)."""

    def send_packed_command(self, command: Sequence[bytes]) -> None: ...
    def read_response(self) -> object: ...
    def disconnect(self) -> None: ...


class PackedPipeline:
    """Packed commands on one connection; replies are read one batch late."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._in_flight = 0

    def send(self, commands: Sequence[bytes]) -> None:
        """Send ``commands``, then wait for the replies of the previous batch."""
        self._connection.send_packed_command(commands)
        previous, self._in_flight = self._in_flight, len(commands)
        self._read(previous)

    def send_groups(self, groups: Iterable[tuple[str, Sequence[bytes]]]) -> None:
        """``send`` of every group's commands: one server holds every key."""
        self.send([command for _, commands in groups for command in commands])

    def drain(self) -> None:
        previous, self._in_flight = self._in_flight, 0
        self._read(previous)

    def _read(self, count: int) -> None:
        # An error reply raises here (redis-py turns it into ResponseError).
        for _ in range(count):
            self._connection.read_response()


class ClusterPackedPipeline:
    """A ``PackedPipeline`` per cluster master, each sent the commands of its slots."""

    def __init__(self, client: RedisCluster, stack: contextlib.ExitStack) -> None:
        self._client = client
        self._stack = stack
        self._pipelines: dict[str, PackedPipeline] = {}

    def send_groups(self, groups: Iterable[tuple[str, Sequence[bytes]]]) -> None:
        """Send each group's commands (about the slot of its key) to that slot's master."""
        by_node: dict[str, list[bytes]] = {}
        for key, commands in groups:
            by_node.setdefault(self._node_of(key), []).extend(commands)
        for name, commands in by_node.items():
            self._pipelines[name].send(commands)

    def _node_of(self, key: str) -> str:
        node = self._client.nodes_manager.get_node_from_slot(key_slot(key.encode()))
        if node.name not in self._pipelines:
            pool = self._client.get_redis_connection(node).connection_pool
            self._pipelines[node.name] = PackedPipeline(self._stack.enter_context(_borrowed(pool)))
        return str(node.name)

    def drain(self) -> None:
        for pipeline in self._pipelines.values():
            pipeline.drain()


@contextlib.contextmanager
def _borrowed(pool: ConnectionPool) -> Iterator[_Connection]:
    borrowed = pool.get_connection()
    connection = cast("_Connection", borrowed)
    try:
        yield connection
    except BaseException:
        # Replies may be left unread: the connection must not go back in use as it is.
        connection.disconnect()
        raise
    finally:
        pool.release(borrowed)


@contextlib.contextmanager
def packed_pipeline(client: RedisClient) -> Iterator[PackedPipeline | ClusterPackedPipeline]:
    """Packed commands on a connection of ``client``'s pool (one per master of a
    cluster), drained at the end."""
    with contextlib.ExitStack() as stack:
        pipeline: PackedPipeline | ClusterPackedPipeline
        if isinstance(client, RedisCluster):
            pipeline = ClusterPackedPipeline(client, stack)
        else:
            pipeline = PackedPipeline(stack.enter_context(_borrowed(client.connection_pool)))
        yield pipeline
        pipeline.drain()


def _set_keys(qkeys: QueueKeys) -> dict[tuple[str, int], str]:
    """The sorted set of each (state, priority): what an entry's place depends on."""
    keys = {(QueueState.PENDING.value, p): qkeys.ready(p) for p in PRIORITIES}
    for priority in PRIORITIES:
        keys[QueueState.LEASED.value, priority] = qkeys.leased
        keys[QueueState.DEAD.value, priority] = qkeys.dead
    return keys


class EntryPacker:
    """Packs the load commands of one queue's entries."""

    def __init__(self, qkeys: QueueKeys) -> None:
        self._qkeys = qkeys
        self._set_keys = _set_keys(qkeys)
        # The limits of the loaded entries, which a rebuild holds full for a while.
        self.closer = LimitCloser()

    def pack(self, entries: Sequence[EncodedEntry]) -> list[bytes]:
        eids, _, versions, _, _, _, _, items = zip(*entries, strict=True)
        slots, members_by_key = self._places(entries)
        qkeys = self._qkeys
        commands = [
            _hset(qkeys.ver, eids, versions),
            _hset(qkeys.item, eids, items),
            _hset(qkeys.state, eids, slots),
        ]
        commands += [pack((_ZADD, key, *members)) for key, members in members_by_key.items()]
        return commands + self._limits([entry for entry in entries if has_limits(entry[7])])

    def _limits(self, entries: Sequence[EncodedEntry]) -> list[bytes]:
        """The limit records of the entries that have limits (few decode at all)."""
        commands = []
        leased = QueueState.LEASED.value
        for eid, _queue, _version, state, _p, _lease, _score, blob in entries:
            limits = decode_item(blob).limits
            if limits is None:
                continue
            commands.append(pack((_HSET, self._qkeys.lim, eid, limits.descriptor())))
            if state == leased and limits.concurrency_key is not None:
                commands.append(pack((_SADD, self._qkeys.lim_run(limits.concurrency_key), eid)))
            self.closer.add(limits)
        return commands

    def _places(self, entries: Sequence[EncodedEntry]) -> tuple[list[str], dict[str, list[_Arg]]]:
        """The ``state`` hash value of each entry (``<priority>|<lease id>|``, as the
        apply script writes it), and score and member of each by its sorted set."""
        slots: list[str] = []
        members: dict[str, list[_Arg]] = {}
        set_keys = self._set_keys
        leased = QueueState.LEASED.value
        for eid, _queue, _version, state, priority, lease_id, score, _item in entries:
            key = set_keys.get((state, priority))
            if key is None or (state == leased and lease_id is None):
                raise ValueError(f"entry {eid} ({state}, priority {priority}) has no place")
            slots.append(f"{priority}|{lease_id if state == leased else ''}|")
            members.setdefault(key, []).extend((score, eid))
        return slots, members


def _hset(key: str, fields: Sequence[Any], values: Sequence[Any]) -> bytes:
    # Slice assignment interleaves fields and values without a Python-level loop.
    args: list[Any] = [None] * (2 * len(fields) + 2)
    args[0], args[1] = _HSET, key
    args[2::2] = fields
    args[3::2] = values
    return pack(tuple(args))


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in the Redis protocol (str, bytes and int arguments)."""
    # The stub types the argument as a 1-tuple; any tuple of those types is accepted.
    return bytes(hiredis.pack_command(cast("Any", args)))
