"""The composition root: settings in, wired objects out. Nothing else builds them."""

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Self

import redis

from jobledger.domain.ledger import Ledger
from jobledger.projections.checkpoint import Checkpoint
from jobledger.projections.database import Database
from jobledger.projections.job_index import JobIndex
from jobledger.projections.memory_queue import MemoryQueue
from jobledger.projections.queue import QueueBackend
from jobledger.projections.queue_projection import LogReader
from jobledger.projections.redis_keys import Keys
from jobledger.projections.redis_queue import RedisQueue
from jobledger.runtime.breakers import Breakers, BreakerSettings
from jobledger.runtime.handlers.registry import load_registry, shell_commands
from jobledger.runtime.handlers.shell import ShellSettings
from jobledger.runtime.handlers.webhook import WebhookSettings
from jobledger.runtime.leader import (
    Leadership,
    LeaderTiming,
    LocalLeadership,
    RedisLeadership,
)
from jobledger.runtime.metrics import Metrics
from jobledger.runtime.presence import MemoryPresence, Presence, RedisPresence
from jobledger.runtime.projector import Projector, build_projector
from jobledger.runtime.scheduler import Scheduler, SchedulerConfig
from jobledger.runtime.settings import Settings
from jobledger.runtime.store import open_ledger, projection_database, read_store_id
from jobledger.runtime.worker import Worker, WorkerConfig
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
    metrics: Metrics
    database: Database
    presence: Presence
    _redis: redis.Redis | None = None

    def reader(self) -> LogReader:
        return LogReader(self.ledger, self.settings.projection_page_size)

    def leadership(self) -> Leadership:
        """Redis election when Redis is configured; the embedded mode always leads."""
        if self._redis is None:
            return LocalLeadership()
        settings = self.settings
        timing = LeaderTiming(
            ttl=settings.leader_ttl_ms / 1000,
            renew_every=settings.leader_renew_ms / 1000,
            poll=settings.leader_poll_ms / 1000,
        )
        # The pid in the token tells an operator (and the fault tests) which process leads.
        return RedisLeadership(
            self._redis,
            Keys(settings.redis_prefix),
            timing=timing,
            name=f"{socket.gethostname()}-{os.getpid()}",
        )

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            grace=timedelta(seconds=self.settings.misfire_grace_seconds),
            tick_interval=self.settings.scheduler_tick_ms / 1000,
        )

    def scheduler(
        self,
        leadership: Leadership | None = None,
        config: SchedulerConfig | None = None,
    ) -> Scheduler:
        return Scheduler(
            self.ledger,
            self.writer,
            JobIndex(self.ledger, self.database),
            leadership or self.leadership(),
            queue=self.queue,
            checkpoint=self.checkpoint,
            config=config or self.scheduler_config(),
            metrics=self.metrics,
        )

    def worker(self, worker_id: str | None = None) -> Worker:
        settings = self.settings
        config = WorkerConfig(
            queues=tuple(q.strip() for q in settings.worker_queues.split(",") if q.strip()),
            slots=settings.worker_slots,
            lease_ttl=timedelta(seconds=settings.worker_lease_ttl_seconds),
            grace=settings.worker_grace_seconds,
        )
        name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        return Worker(
            self.ledger,
            self.writer,
            self.queue,
            load_registry(
                settings.handlers,
                webhook=WebhookSettings(
                    allow=tuple(a.strip() for a in settings.webhook_allow.split(",") if a.strip()),
                    timeout=settings.webhook_timeout_seconds,
                ),
                shell=ShellSettings(
                    commands=shell_commands(settings.shell_commands),
                    timeout=settings.shell_timeout_seconds,
                ),
                queue=self.queue,
            ),
            worker_id=name,
            config=config,
            breakers=self.breakers(),
            presence=self.presence,
        )

    def breakers(self) -> Breakers:
        settings = self.settings
        return Breakers(
            self._redis,
            Keys(settings.redis_prefix),
            BreakerSettings(
                fail_max=settings.breaker_fail_max, reset_timeout=settings.breaker_reset_seconds
            ),
        )

    def projector(self) -> Projector:
        return build_projector(
            self.settings, self.ledger, self.queue, self.checkpoint, self.store_id
        )

    def close(self) -> None:
        self.writer.close()
        self.ledger.close()
        self.database.close()
        if self._redis is not None:
            self._redis.close()

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
    client = redis.Redis.from_url(settings.redis_url) if settings.redis_url else None
    queue: QueueBackend
    if client is not None:
        queue = RedisQueue(client, prefix=settings.redis_prefix)
    else:
        # Embedded mode: the queue lives in this process and is rebuilt from the log.
        queue = MemoryQueue()
    database = projection_database(settings)
    return Container(
        settings=settings,
        ledger=ledger,
        writer=writer,
        queue=queue,
        checkpoint=Checkpoint(database),
        store_id=read_store_id(settings),
        metrics=Metrics(),
        database=database,
        presence=(
            RedisPresence(client, Keys(settings.redis_prefix))
            if client is not None
            else MemoryPresence()
        ),
        _redis=client,
    )
