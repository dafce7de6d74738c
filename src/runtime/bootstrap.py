"""The composition root: settings in, wired objects out. Nothing else builds them."""

import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Self

from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.progress import ProgressPolicy
from jobledger.persistence.ledger import Ledger
from jobledger.projections.checkpoint import Checkpoint
from jobledger.projections.database import Database
from jobledger.projections.job_index import JobIndex
from jobledger.projections.log import LogReader
from jobledger.projections.memory_queue import MemoryQueue
from jobledger.projections.quarantine import (
    JOB_SCHEDULE_FOLLOWER,
    QUEUE_FOLLOWER,
    READ_MODELS_FOLLOWER,
    RELEASES_FOLLOWER,
    ApplyOne,
    Isolation,
    Quarantine,
    RetryReport,
    Unapplied,
    retry,
    unapplied,
)
from jobledger.projections.queue import QueueBackend
from jobledger.projections.queue_projection import verify_queue
from jobledger.projections.read_models import REPLAY_PAGE, ReadModels
from jobledger.projections.redis_client import RedisClient
from jobledger.projections.redis_client import bounded as bounded_redis
from jobledger.projections.redis_client import connect as connect_redis
from jobledger.projections.redis_keys import Keys
from jobledger.projections.redis_queue import RedisQueue
from jobledger.runtime.accounts import Accounts, AccountSettings
from jobledger.runtime.breakers import Breakers, BreakerSettings
from jobledger.runtime.budgets import Budgets, MemoryBudgets, RedisBudgets
from jobledger.runtime.handlers.archive import ArchiveRun
from jobledger.runtime.handlers.registry import HandlerRegistry, load_registry, shell_commands
from jobledger.runtime.handlers.shell import ShellSettings
from jobledger.runtime.handlers.webhook import WebhookSettings
from jobledger.runtime.leader import (
    Leadership,
    LeaderTiming,
    LocalLeadership,
    RedisLeadership,
    StoredEpochs,
    current_leader,
)
from jobledger.runtime.metrics import Metrics
from jobledger.runtime.outages import POSTGRESQL, REDIS, DependencyHealth
from jobledger.runtime.presence import MemoryPresence, Presence, RedisPresence
from jobledger.runtime.projector import Projector, build_projector
from jobledger.runtime.rebuild_processes import ProcessParts
from jobledger.runtime.releases import ReleaseLoop, Releaser, RetryLeadership
from jobledger.runtime.scheduler import Scheduler, SchedulerConfig
from jobledger.runtime.settings import Settings
from jobledger.runtime.store import (
    check_migrated,
    open_ledger,
    projection_database,
    read_store_id,
)
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
    health: DependencyHealth
    _redis: RedisClient | None = None
    _local_breakers: Breakers | None = None
    _handlers: HandlerRegistry | None = None
    _archive: ArchiveRun | None = None
    _budgets: Budgets | None = None
    _breakers_lock: threading.Lock = field(default_factory=threading.Lock)

    def reader(self, *, topics: Sequence[str] | None = None) -> LogReader:
        """A reader of the log: of the events the queue folds, unless told other ``topics``
        (``()`` reads every event)."""
        page = self.settings.projection_page_size
        if topics is None:
            return LogReader(self.ledger, page)
        return LogReader(self.ledger, page, topics=topics)

    def leadership(self) -> Leadership:
        """Redis election when Redis is configured; the embedded mode always leads.
        Epochs come from the store either way (ADR 9)."""
        # Built without the CLI's start check too (tests, embedding): no leader may run
        # on a store without its epoch counter, so check here as every role does.
        check_migrated(self.settings)
        epochs = StoredEpochs(self.database)
        if self._redis is None:
            return LocalLeadership(epochs)
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
            epochs,
            timing=timing,
            name=f"{socket.gethostname()}-{os.getpid()}",
            health=self.health,
        )

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            grace=timedelta(seconds=self.settings.misfire_grace_seconds),
            tick_interval=self.settings.scheduler_tick_ms / 1000,
            job_cache=self.settings.aggregate_cache_size,
        )

    def scheduler(
        self,
        leadership: Leadership | None = None,
        config: SchedulerConfig | None = None,
    ) -> Scheduler:
        """The scheduler, with its releases loop (run by ``SchedulerService``)."""
        leadership = leadership or self.leadership()
        config = config or self.scheduler_config()
        return Scheduler(
            self.ledger,
            self.writer,
            JobIndex(self.ledger, self.database, isolation=self.isolation(JOB_SCHEDULE_FOLLOWER)),
            leadership,
            queue=self.queue,
            checkpoint=self.checkpoint,
            config=config,
            metrics=self.metrics,
            releases=self.release_loop(leadership, poll=config.tick_interval),
        )

    def releaser(self, leadership: Leadership) -> Releaser:
        """What follows a run's end, carried out while ``leadership`` leads."""
        return Releaser(
            self.ledger, self.database, leadership, isolation=self.isolation(RELEASES_FOLLOWER)
        )

    def release_loop(self, leadership: Leadership, *, poll: float) -> ReleaseLoop:
        settings = self.settings
        return ReleaseLoop(
            self.releaser(leadership),
            poll=poll,
            conninfo=settings.database_url if settings.uses_postgres else None,
            health=self.health.watch(POSTGRESQL) if settings.uses_postgres else None,
        )

    def worker(self, worker_id: str | None = None, *, now: Clock = utc_now) -> Worker:
        """A worker on this container's stores; ``now`` is its clock (its lease
        deadlines and ready times)."""
        settings = self.settings
        config = WorkerConfig(
            queues=settings.worker_queues,
            slots=settings.worker_slots,
            lease_ttl=timedelta(seconds=settings.worker_lease_ttl_seconds),
            grace=settings.worker_grace_seconds,
            # Deferred runs come back when the breaker may let a probe through.
            defer_when_open=timedelta(seconds=settings.breaker_reset_seconds),
            progress=ProgressPolicy(log_every=timedelta(seconds=settings.progress_log_seconds)),
        )
        name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        return Worker(
            self.ledger,
            self.writer,
            self.queue,
            self.handlers(),
            worker_id=name,
            config=config,
            breakers=self.breakers(),
            presence=self.presence,
            metrics=self.metrics,
            health=self.health,
            now=now,
        )

    def handlers(self) -> HandlerRegistry:
        """Built-in handlers, entry points and the configured dotted paths; loaded once
        (the start-up check, the worker and the API share it)."""
        if self._handlers is None:
            self._handlers = self._load_handlers()
        return self._handlers

    def _load_handlers(self) -> HandlerRegistry:
        settings = self.settings
        return load_registry(
            settings.handlers,
            webhook=WebhookSettings(
                allow=settings.webhook_allow,
                timeout=settings.webhook_timeout_seconds,
            ),
            shell=ShellSettings(
                commands=shell_commands(settings.shell_commands),
                timeout=settings.shell_timeout_seconds,
            ),
            queue=self.queue,
            read_models=self.database,
            test_handlers=settings.test_handlers_enabled,
            archive=lambda: self._archive,
        )

    def provide_archive(self, run: ArchiveRun) -> None:
        """The archive use case (built above the runtime) that ``system.archive`` runs."""
        self._archive = run

    def head(self) -> int:
        """The position of the newest event in the log (0 when it is empty)."""
        return self.ledger.recorder.max_notification_id() or 0

    def ping(self) -> str:
        """Raise if the queue backend cannot be reached; else name it."""
        if self._redis is None:
            return "memory"
        self._redis.ping()
        return "redis"

    def probes(self) -> dict[str, tuple[str, Callable[[], object]]]:
        """What /ready checks, by check name: the dependency each stands for and a quick
        probe that raises while it cannot be reached (and answers what it found)."""
        store = POSTGRESQL if self.settings.uses_postgres else "sqlite"
        queue = REDIS if self._redis is not None else "memory"
        return {"store": (store, self._probe_store), "queue": (queue, self.ping)}

    def _probe_store(self) -> int:
        # Through the projection pool, which gives up within seconds: the event store's
        # calls retry for far longer while the server is down.
        with self.database.transaction() as cursor:
            cursor.execute("SELECT 1")
        return self.head()

    def dependencies(self) -> tuple[str, ...]:
        """The servers this process needs (none in the embedded mode)."""
        return tuple(
            dependency
            for dependency, _ in self.probes().values()
            if dependency in {POSTGRESQL, REDIS}
        )

    def leader_status(self) -> tuple[str | None, int]:
        """(the leading scheduler's token or None, the leader epoch)."""
        if self._redis is None:
            # The embedded process leads under the latest epoch it took from the store.
            return ("embedded", StoredEpochs(self.database).latest_epoch())
        return current_leader(self._redis, Keys(self.settings.redis_prefix))

    def breakers(self) -> Breakers:
        """The handlers' circuit breakers. Without Redis their state lives in memory, so
        every part of the process (the worker, the API's system view) gets the same."""
        with self._breakers_lock:
            if self._redis is None and self._local_breakers is not None:
                return self._local_breakers
            settings = self.settings
            breakers = Breakers(
                self._redis,
                Keys(settings.redis_prefix),
                BreakerSettings(
                    fail_max=settings.breaker_fail_max,
                    reset_timeout=settings.breaker_reset_seconds,
                ),
                health=self.health,
            )
            if self._redis is None:
                self._local_breakers = breakers
            return breakers

    def read_models(self) -> ReadModels:
        """The read models on this container's database (queries, lag, rebuilds)."""
        settings = self.settings
        parts = None
        if settings.uses_postgres:  # the shares read the log with PostgreSQL's functions
            parts = ProcessParts(
                settings,
                settings.rebuild_process_count,
                page_size=max(settings.projection_page_size, REPLAY_PAGE),
            )
        return ReadModels(
            self.ledger,
            self.database,
            page_size=settings.projection_page_size,
            isolation=self.isolation(READ_MODELS_FOLLOWER),
            parts=parts,
        )

    def quarantine(self) -> Quarantine:
        """The events followers could not apply (the API, the CLI and followers)."""
        return Quarantine(self.database)

    def isolation(self, follower: str, *, persist: bool = True) -> Isolation:
        """How ``follower`` isolates events here: recorded, and counted in metrics. The
        job-schedule index holds no stream: each job event sets the job's next fire
        whole, so the events after a quarantined one keep the index right. Nor do the
        releases: each run's end releases what it releases on its own."""
        return Isolation(
            follower,
            self.quarantine(),
            persist=persist,
            hold=follower not in {JOB_SCHEDULE_FOLLOWER, RELEASES_FOLLOWER},
            counted=self.metrics.count_quarantined,
        )

    def verify_queue(self) -> tuple[list[str], Unapplied]:
        """The queue's differences from a fold of the log, and the events that fold
        could not apply, sorted by the quarantine table (nothing is recorded)."""
        isolation = self.isolation(QUEUE_FOLLOWER, persist=False)
        differences = verify_queue(self.reader(), self.queue, isolation)
        return differences, unapplied(isolation)

    def quarantine_appliers(self, projector: Projector) -> dict[str, ApplyOne]:
        """Each follower's way of applying one quarantined event (for a retry)."""
        index = JobIndex(self.ledger, self.database)
        epoch = StoredEpochs(self.database).latest_epoch()
        releaser = self.releaser(RetryLeadership(epoch))
        return {
            **projector.appliers(),
            JOB_SCHEDULE_FOLLOWER: index.apply_one,
            RELEASES_FOLLOWER: releaser.apply_one,
        }

    def retry_quarantined(self, ids: Sequence[int] | None) -> RetryReport:
        """Apply quarantined events again (``ids`` and their streams, or all), each in
        the follower it failed in, on this process's queue backend."""
        projector = self.projector()
        try:
            appliers = self.quarantine_appliers(projector)
            return retry(self.quarantine(), appliers, projector.queue.reader.row_at, ids=ids)
        finally:
            projector.close()

    def projector(self) -> Projector:
        return build_projector(
            self.settings,
            self.ledger,
            self.queue,
            self.checkpoint,
            self.store_id,
            metrics=self.metrics,
            health=self.health,
        )

    def budgets(self) -> Budgets:
        """The API callers' budgets: in Redis, shared by every API process, when Redis
        is configured; else this process's own."""
        with self._breakers_lock:
            if self._budgets is None:
                self._budgets = (
                    MemoryBudgets()
                    if self._redis is None
                    else RedisBudgets(self._redis, Keys(self.settings.redis_prefix))
                )
            return self._budgets

    def accounts(self) -> Accounts:
        """Users, sessions and API tokens, in the event store's database."""
        return Accounts(self.database, AccountSettings.from_settings(self.settings))

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


def bootstrap(settings: Settings, *, role: str = "cli") -> Container:
    """The wired objects of one process; ``role`` names it in outage lines."""
    ledger = open_ledger(settings)
    metrics = Metrics()
    health = DependencyHealth(role, gauge=metrics.dependency_up)
    writer = GroupCommitWriter(
        ledger,
        max_batch=settings.writer_max_batch,
        max_delay=settings.writer_max_delay_ms / 1000,
        metrics=metrics,
        health=health,
    )
    client = (
        # Timeouts: a Redis that stops answering without closing the connection (a
        # partition, a frozen server) must fail a call within a second or two, so the
        # loops back off and the API answers 503 instead of hanging (ADR 79). No call
        # blocks on the server side, and each reply of a rebuild's pipeline comes far
        # sooner; options in the URL take precedence.
        connect_redis(settings.redis_url, **bounded_redis(settings.redis_timeout_ms / 1000))
        if settings.redis_url
        else None
    )
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
        metrics=metrics,
        database=database,
        presence=(
            RedisPresence(client, Keys(settings.redis_prefix))
            if client is not None
            else MemoryPresence()
        ),
        health=health,
        _redis=client,
    )
