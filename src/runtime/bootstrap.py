"""The composition root: settings in, wired objects out. Nothing else builds them."""

from dataclasses import dataclass, field
from typing import Self

import redis

from jobledger.domain.ledger import Ledger
from jobledger.projections.checkpoint import Checkpoint
from jobledger.projections.memory_queue import MemoryQueue
from jobledger.projections.queue import QueueBackend
from jobledger.projections.queue_projection import LogReader
from jobledger.projections.redis_queue import RedisQueue
from jobledger.runtime.projector import Projector, build_projector
from jobledger.runtime.settings import Settings
from jobledger.runtime.store import open_ledger, projection_database, read_store_id
from jobledger.runtime.writer import GroupCommitWriter


@dataclass
class Container:
    """Everything a jobledger process runs on; close it to release connections."""

    settings: Settings
    ledger: Ledger
    writer: GroupCommitWriter
    queue: QueueBackend
    checkpoint: Checkpoint
    store_id: str
    _closers: list[redis.Redis] = field(default_factory=list)

    def reader(self) -> LogReader:
        return LogReader(self.ledger, self.settings.projection_page_size)

    def projector(self) -> Projector:
        return build_projector(
            self.settings, self.ledger, self.queue, self.checkpoint, self.store_id
        )

    def close(self) -> None:
        self.writer.close()
        self.ledger.close()
        for client in self._closers:
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bootstrap(settings: Settings) -> Container:
    ledger = open_ledger(settings)
    writer = GroupCommitWriter(
        ledger,
        max_batch=settings.writer_max_batch,
        max_delay=settings.writer_max_delay_ms / 1000,
    )
    closers: list[redis.Redis] = []
    queue: QueueBackend
    if settings.redis_url:
        client = redis.Redis.from_url(settings.redis_url)
        closers.append(client)
        queue = RedisQueue(client, prefix=settings.redis_prefix)
    else:
        # Embedded mode: the queue lives in this process and is rebuilt from the log.
        queue = MemoryQueue()
    return Container(
        settings=settings,
        ledger=ledger,
        writer=writer,
        queue=queue,
        checkpoint=Checkpoint(projection_database(settings)),
        store_id=read_store_id(settings),
        _closers=closers,
    )
