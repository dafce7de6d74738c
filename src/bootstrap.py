"""The composition root: settings in, wired objects out. Nothing else builds them.

The only module that names the backends (``jobledger.adapters``): the services, the
roles and the API get ports from here, and a role's parts are built here from the one
table of ``runtime.roles``. The CLI and `jobledger dev` start from here.
"""

import contextlib
import functools
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Self
from uuid import UUID

from jobledger.adapters.memory.bell import MemoryBell
from jobledger.adapters.memory.budgets import MemoryBudgets
from jobledger.adapters.memory.presence import MemoryPresence
from jobledger.adapters.memory.queue import MemoryQueue
from jobledger.adapters.postgres.checkpoint import PostgresCheckpoint
from jobledger.adapters.postgres.listener import PostgresChannels
from jobledger.adapters.postgres.outbox import PostgresOutbox
from jobledger.adapters.redis.bell import RedisBell
from jobledger.adapters.redis.breakers import shared_storage
from jobledger.adapters.redis.budgets import RedisBudgets
from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.client import bounded as bounded_redis
from jobledger.adapters.redis.client import connect as connect_redis
from jobledger.adapters.redis.keys import Keys
from jobledger.adapters.redis.leadership import LeaderTiming, RedisLeadership, current_leader
from jobledger.adapters.redis.presence import RedisPresence
from jobledger.adapters.redis.queue import RedisQueue
from jobledger.adapters.sql.accounts import SqlAccountStore
from jobledger.adapters.sql.archives import SqlArchiveBooks
from jobledger.adapters.sql.checkpoint import SqlCheckpoint
from jobledger.adapters.sql.epochs import StoredEpochs
from jobledger.adapters.sql.job_schedule import SqlJobSchedule
from jobledger.adapters.sql.positions import SqlPositions
from jobledger.adapters.sql.quarantine import SqlQuarantineTable
from jobledger.adapters.sql.read_model_queries import SqlReadModelQueries
from jobledger.adapters.sql.read_models import SqlReadModelTables
from jobledger.adapters.store import (
    archive_lock,
    check_migrated,
    event_tables,
    migrate,
    open_ledger,
    projection_database,
    read_store_id,
    wait_for_store,
)
from jobledger.domain.clock import Clock, utc_now
from jobledger.domain.progress import ProgressPolicy
from jobledger.infra.breakers import BreakerSettings, in_memory
from jobledger.infra.budgets import Budgets
from jobledger.infra.leadership import Leadership, LocalLeadership
from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import POSTGRESQL, REDIS, DependencyHealth, OutageProbe
from jobledger.infra.presence import Presence
from jobledger.infra.settings import Settings
from jobledger.infra.start_wait import StartWait
from jobledger.infra.writer import GroupCommitWriter
from jobledger.persistence.ledger import Ledger
from jobledger.projections.bell import Bell
from jobledger.projections.database import Database
from jobledger.projections.log.archive_store import ArchiveStore
from jobledger.projections.log.reader import Listen, LogReader, Wakeup
from jobledger.projections.quarantine import (
    JOB_SCHEDULE_FOLLOWER,
    NOTIFIER_FOLLOWER,
    READ_MODELS_FOLLOWER,
    RELEASES_FOLLOWER,
    ApplyOne,
    Isolation,
    Quarantine,
    ReadRow,
    isolation_of,
)
from jobledger.projections.queue.backend import QueueBackend, QueueState
from jobledger.projections.queue.checkpoint import Checkpoint, open_counts
from jobledger.projections.queue.projection import QueueProjection
from jobledger.projections.queue.signal import WorkSignal
from jobledger.projections.read_models.follower import REPLAY_PAGE, ReadModels
from jobledger.projections.read_models.job_index import JobIndex
from jobledger.projections.read_models.parts import PartRunner
from jobledger.projections.read_models.tables import ReadModelTables
from jobledger.runtime import dev, roles
from jobledger.runtime.breakers import Breakers
from jobledger.runtime.dev import DevOptions, Say
from jobledger.runtime.handlers.archive import ArchiveRun
from jobledger.runtime.handlers.notify import NotifySettings
from jobledger.runtime.handlers.registry import (
    HandlerRegistry,
    load_registry,
    shell_commands,
    unknown_handler_fix,
)
from jobledger.runtime.handlers.shell import ShellSettings
from jobledger.runtime.handlers.webhook import WebhookSettings
from jobledger.runtime.lifecycle import MetricsServer, Part, WorkerRunner
from jobledger.runtime.notifier import NOTIFIER_POLL_SECONDS, Notifier, NotifierLoop
from jobledger.runtime.projector import Projector, build_projector
from jobledger.runtime.rebuild_processes import ProcessParts
from jobledger.runtime.relay import relay_part
from jobledger.runtime.releases import ReleaseLoop, Releaser, RetryLeadership
from jobledger.runtime.roles import parts_of
from jobledger.runtime.scheduler import Scheduler, SchedulerConfig, SchedulerService
from jobledger.runtime.worker import Worker, WorkerConfig
from jobledger.services.accounts import AccountService
from jobledger.services.admin import Admin, Followers
from jobledger.services.application import Services
from jobledger.services.archives import Archives
from jobledger.services.attendance import Attendance, stale_after
from jobledger.services.bulk_runs import BulkRuns
from jobledger.services.caps import QueueRoom
from jobledger.services.dead_letters import DeadLetters
from jobledger.services.declared_jobs import DeclaredJobs
from jobledger.services.event_stream import EventStream
from jobledger.services.executions import Executions
from jobledger.services.identities import Accounts, AccountSettings
from jobledger.services.jobs import HandlerNames, Jobs
from jobledger.services.limits import Limits
from jobledger.services.notifications import Notifications
from jobledger.services.outbox import Outbox
from jobledger.services.queues import Queues
from jobledger.services.system import Sources, System
from jobledger.services.views import Views
from jobledger.services.waiting import WaitingReasons
from jobledger.services.waits import ExecutionWaits
from jobledger.services.workflows import Workflows

if TYPE_CHECKING:
    from litestar import Litestar

    from jobledger.api.state import ApiPorts

# What the CLI runs through the root (it names no backend itself).
__all__ = [
    "Container",
    "PartOptions",
    "bootstrap",
    "build_services",
    "check_migrated",
    "migrate",
    "preflight",
    "role_parts",
    "run_dev",
    "web_app",
]


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
    # Says when runs became ready, so idle workers lease at once.
    signal: WorkSignal
    # Rung by the read models' follower after each page: the long-polls look again.
    read_models_moved: Bell
    _redis: RedisClient | None = None
    _local_breakers: Breakers | None = None
    _handlers: HandlerRegistry | None = None
    _archive: ArchiveRun | None = None
    _budgets: Budgets | None = None
    _breakers_lock: threading.Lock = field(default_factory=threading.Lock)
    # One listening connection for every channel this process follows (PostgreSQL only).
    _channels: PostgresChannels | None = None

    def __post_init__(self) -> None:
        if self.settings.uses_postgres:
            self._channels = PostgresChannels(self.settings.database_url)

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

    def scheduler_service(self) -> SchedulerService:
        """The scheduler role's part: the scheduler with its releases and its notifier,
        all acting under one leadership and woken by one listener."""
        leadership = self.leadership()
        config = self.scheduler_config()
        notices = Wakeup()
        notifier = NotifierLoop(
            self.notifier(leadership),
            poll=NOTIFIER_POLL_SECONDS,
            wakeup=notices,
            health=self.health.watch(POSTGRESQL) if self.settings.uses_postgres else None,
        )
        return SchedulerService(
            self.scheduler(leadership, config, also_wake=[notices]),
            health=self.health,
            also_run=[notifier],
        )

    def notifier(self, leadership: Leadership) -> Notifier:
        """What the notification rules ask for, made while ``leadership`` leads."""
        return Notifier(
            self.ledger,
            self.database,
            leadership,
            positions=SqlPositions(self.database),
            queries=SqlReadModelQueries(self.database),
            backend=self.queue,
            isolation=self.isolation(NOTIFIER_FOLLOWER),
            metrics=self.metrics,
        )

    def scheduler(
        self,
        leadership: Leadership | None = None,
        config: SchedulerConfig | None = None,
        *,
        also_wake: Sequence[Wakeup] = (),
    ) -> Scheduler:
        """The scheduler, with its releases loop (run by ``SchedulerService``)."""
        leadership = leadership or self.leadership()
        config = config or self.scheduler_config()
        # The releases' listener also tells the scheduler when the log moved (ADR 102).
        changes = Wakeup()
        return Scheduler(
            self.ledger,
            self.writer,
            JobIndex(
                self.ledger,
                SqlJobSchedule(self.database),
                isolation=self.isolation(JOB_SCHEDULE_FOLLOWER),
            ),
            leadership,
            queue=self.queue,
            checkpoint=self.checkpoint,
            config=config,
            metrics=self.metrics,
            releases=self.release_loop(
                leadership, poll=config.tick_interval, also_wake=[changes, *also_wake]
            ),
            changes=changes,
        )

    def releaser(self, leadership: Leadership) -> Releaser:
        """What follows a run's end, carried out while ``leadership`` leads."""
        return Releaser(
            self.ledger,
            self.database,
            leadership,
            positions=SqlPositions(self.database),
            isolation=self.isolation(RELEASES_FOLLOWER),
        )

    def release_loop(
        self, leadership: Leadership, *, poll: float, also_wake: Sequence[Wakeup] = ()
    ) -> ReleaseLoop:
        settings = self.settings
        listen = self.listen()
        if listen is not None:
            # Woken by the listener as the log moves: the poll is a fallback only.
            poll = max(poll, settings.projection_poll_ms / 1000)
        return ReleaseLoop(
            self.releaser(leadership),
            poll=poll,
            listen=listen,
            health=self.health.watch(POSTGRESQL) if settings.uses_postgres else None,
            also_wake=also_wake,
        )

    def listen(self) -> Listen | None:
        """How a role listens on a channel of the store: PostgreSQL's LISTEN; None for
        a store without channels (its followers poll)."""
        return None if self._channels is None else self._channels.listen

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
            signal=self.signal,
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
            notify=NotifySettings.from_settings(settings, os.environ),
            queue=self.queue,
            read_models=self.read_model_tables(),
            test_handlers=settings.test_handlers_enabled,
            archive=lambda: self._archive,
        )

    def provide_archive(self, run: ArchiveRun) -> None:
        """The archive use case (built above the runtime) that ``system.archive`` runs."""
        self._archive = run

    def open_runs(self, job_id: UUID) -> int:
        """A job's pending and running executions, as the checkpoint has them."""
        counts = open_counts(self.checkpoint, job_id)
        return counts.get(QueueState.PENDING, 0) + counts.get(QueueState.LEASED, 0)

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
            storage = (
                in_memory
                if self._redis is None
                else shared_storage(self._redis, Keys(settings.redis_prefix))
            )
            breakers = Breakers(
                storage,
                BreakerSettings(
                    fail_max=settings.breaker_fail_max,
                    reset_timeout=settings.breaker_reset_seconds,
                ),
                health=self.health,
            )
            if self._redis is None:
                self._local_breakers = breakers
            return breakers

    def read_model_tables(self) -> ReadModelTables:
        """The read-model tables on this container's database (the cleanup, the
        archive, a rebuild's share)."""
        return SqlReadModelTables(self.database)

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
        return read_models_on(
            self.ledger,
            self.database,
            page_size=settings.projection_page_size,
            isolation=self.isolation(READ_MODELS_FOLLOWER),
            parts=parts,
        )

    def quarantine(self) -> Quarantine:
        """The events followers could not apply (the API, the CLI and followers)."""
        return Quarantine(SqlQuarantineTable(self.database))

    def isolation(self, follower: str, *, persist: bool = True) -> Isolation:
        """How ``follower`` isolates events here: recorded, and counted in metrics."""
        return isolation_of(
            follower, self.quarantine(), persist=persist, counted=self.metrics.count_quarantined
        )

    def followers(self) -> Followers:
        """What the admin operations act on (``services.admin``)."""
        return Followers(
            queue=self.queue,
            quarantine=self.quarantine(),
            reader=self.reader,
            queue_projection=self._queue_projection,
            read_models=self.read_models,
            appliers=self._appliers,
            scratch=MemoryQueue,
            counted=self.metrics.count_quarantined,
        )

    @contextlib.contextmanager
    def _queue_projection(self) -> Iterator[QueueProjection]:
        projector = self.projector()
        try:
            yield projector.queue
        finally:
            projector.close()

    @contextlib.contextmanager
    def _appliers(self) -> Iterator[tuple[Mapping[str, ApplyOne], ReadRow]]:
        """Each follower's way of applying one quarantined event (for a retry), on this
        process's queue backend, and how to read an event's row."""
        projector = self.projector()
        try:
            index = JobIndex(self.ledger, SqlJobSchedule(self.database))
            epoch = StoredEpochs(self.database).latest_epoch()
            releaser = self.releaser(RetryLeadership(epoch))
            appliers = {
                **projector.appliers(),
                JOB_SCHEDULE_FOLLOWER: index.apply_one,
                RELEASES_FOLLOWER: releaser.apply_one,
                NOTIFIER_FOLLOWER: self.notifier(RetryLeadership(epoch)).apply_one,
            }
            yield appliers, projector.queue.reader.row_at
        finally:
            projector.close()

    def sources(self) -> Sources:
        """What the system's view reads (``services.system``)."""
        return Sources(
            ledger=self.ledger,
            queue=self.queue,
            presence=self.presence,
            quarantine=self.quarantine(),
            health=self.health,
            settings=self.settings,
            probes=self.probes,
            read_models=self.read_models,
            leader=self.leader_status,
            breakers=self.breakers,
            reader=lambda: self.reader(topics=()),
        )

    def archives(self) -> Archives:
        """The archive use case on this process's stores."""

        def queue_position() -> int | None:
            # The queue of another process (`jobledger dev`'s, in memory) is not known
            # here: its projector applies pages before the checkpoint that is known.
            meta = self.queue.read_meta()
            return None if meta is None else meta.position

        tables = event_tables(self.settings, self.ledger)
        store = ArchiveStore(
            self.ledger,
            self.database,
            tables,
            positions=SqlPositions(self.database),
            books=SqlArchiveBooks(),
            read_models=self.read_model_tables(),
        )
        lock = functools.partial(archive_lock, self.settings)
        return Archives(self.ledger, store, self.settings, queue_position, lock)

    def api_ports(self) -> "ApiPorts":
        """What the HTTP layer needs of this process beside the use cases."""
        from jobledger.api.state import ApiPorts  # noqa: PLC0415 (see web_app)

        return ApiPorts(self.settings, self.metrics, self.health, self.budgets())

    def projector(self) -> Projector:
        return build_projector(
            self.settings,
            self.ledger,
            self.queue,
            self.checkpoint,
            self.store_id,
            open_database=functools.partial(projection_database, self.settings),
            quarantine_table=SqlQuarantineTable,
            positions_table=SqlPositions,
            read_model_tables=SqlReadModelTables,
            listen=self.listen(),
            signal=self.signal,
            read_models_moved=self.read_models_moved,
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
        return Accounts(
            SqlAccountStore(self.database), AccountSettings.from_settings(self.settings)
        )

    def close(self) -> None:
        self.signal.close()
        self.read_models_moved.close()
        self.writer.close()
        self.ledger.close()
        self.database.close()
        if self._redis is not None:
            self._redis.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_models_on(
    ledger: Ledger,
    database: Database,
    *,
    page_size: int = 2000,
    isolation: Isolation | None = None,
    parts: PartRunner | None = None,
) -> ReadModels:
    """The read models in ``database`` (the event store's), their tables and position
    in it; also what tests and benchmarks follow the log with."""
    return ReadModels(
        ledger,
        database,
        positions=SqlPositions(database),
        tables=SqlReadModelTables(database),
        page_size=page_size,
        isolation=isolation,
        parts=parts,
    )


def wait_for_stores(settings: Settings, wait: StartWait | None = None) -> None:
    """Wait, up to ``JOBLEDGER_START_TIMEOUT``, for PostgreSQL and Redis to take a
    connection (a role that starts with the rest of its stack); a mistake in the
    settings stops at once (``infra/start_wait.py``)."""
    wait = wait or StartWait(settings.start_timeout)
    wait_for_store(settings, wait)
    if settings.redis_url:
        wait.until_reachable(REDIS, functools.partial(_ping_redis, settings))


def _ping_redis(settings: Settings) -> None:
    client = connect_redis(settings.redis_url, **bounded_redis(settings.redis_timeout_ms / 1000))
    try:
        client.ping()
    finally:
        client.close()


def name_connections(role: str) -> None:
    """Name this process's PostgreSQL connections ``jobledger-<role>@<host>`` (their
    ``application_name``), so a DBA's ``pg_stat_activity`` says who holds them. Through
    libpq's ``PGAPPNAME``, which every connection of the process reads, the event
    store's pool too; one set in the environment, or in the URL, wins."""
    os.environ.setdefault("PGAPPNAME", f"jobledger-{role}@{socket.gethostname()}"[:63])


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
    signal: WorkSignal
    if client is not None:
        queue = RedisQueue(client, prefix=settings.redis_prefix)
        keys = Keys(settings.redis_prefix)
        signal = RedisBell(client, keys.work_ready())
        moved: Bell = RedisBell(client, keys.read_models_moved())
    else:
        # Embedded mode: the queue lives in this process and is rebuilt from the log.
        queue = MemoryQueue()
        signal = MemoryBell()
        moved = MemoryBell()
    database = projection_database(settings)
    return Container(
        settings=settings,
        ledger=ledger,
        writer=writer,
        queue=queue,
        checkpoint=(
            PostgresCheckpoint(database) if settings.uses_postgres else SqlCheckpoint(database)
        ),
        store_id=read_store_id(settings),
        metrics=metrics,
        database=database,
        presence=(
            RedisPresence(client, Keys(settings.redis_prefix))
            if client is not None
            else MemoryPresence()
        ),
        health=health,
        signal=signal,
        read_models_moved=moved,
        _redis=client,
    )


# ---- the use cases ------------------------------------------------------------------


def build_services(container: Container) -> Services:
    """The use cases over ``container``. Definitions naming a handler this process does
    not have are refused: its workers have the same registry."""
    registry = container.handlers()
    names = frozenset(registry.names())
    settings = container.settings
    room = QueueRoom(container.queue.queues, settings.max_queues)
    handlers = HandlerNames(
        names,
        {name: registry.info(name) for name in names},
        queues=room,
        unknown_fix=unknown_handler_fix,
    )
    waiting = WaitingReasons(
        container.ledger.queue, container.presence, stale_after=stale_after(container.settings)
    )
    views = Views(
        SqlReadModelQueries(container.database),
        container.ledger,
        container.presence,
        waiting=waiting,
    )
    archives = container.archives()
    # The system.archive handler of this process's worker runs this use case.
    container.provide_archive(archives.scheduled)
    ledger, writer, queue = container.ledger, container.writer, container.queue
    system = System(container.sources(), views, names)
    return Services(
        jobs=Jobs(ledger, handlers, open_runs=container.open_runs, archived=archives.archived_ids),
        executions=Executions(ledger, handlers, archives.history),
        dead_letters=DeadLetters(ledger, writer, views),
        bulk_runs=BulkRuns(ledger, writer, views),
        accounts=AccountService(container.accounts()),
        admin=Admin(container.followers()),
        system=system,
        views=views,
        waits=ExecutionWaits(views, moved=container.read_models_moved),
        declared_jobs=DeclaredJobs(ledger, views, handlers),
        outbox=(
            Outbox(PostgresOutbox(container.database), ledger, writer, handlers)
            if settings.uses_postgres
            else None
        ),
        workflows=Workflows(ledger, handlers),
        queues=Queues(
            ledger,
            queue,
            container.checkpoint,
            Attendance(container.presence, stale_after(settings)),
            room=room,
        ),
        archives=archives,
        limits=Limits(ledger, queue, most=settings.max_named_limits),
        event_stream=EventStream(system, views, container.read_models_moved),
        notifications=Notifications(ledger, views),
    )


def web_app(
    container: Container, *, now: Clock = utc_now, services: Services | None = None
) -> "Litestar":
    """The API app over ``container`` (and its use cases, built from it unless given).
    The web stack is imported only where it is served: it would add about 10 MB and a
    second of start-up to every scheduler, worker and projector."""
    from jobledger.api.app import create_app  # noqa: PLC0415 (see above)

    return create_app(container.api_ports(), services or build_services(container), now=now)


# ---- the roles ----------------------------------------------------------------------


@dataclass(frozen=True)
class PartOptions:
    """What a role's parts are built with beyond the container: the use cases (the API,
    the outbox relay, the worker's archive handler), and for `jobledger dev` the API's
    bound ``listener`` and what to call once it listens."""

    services: Services
    listener: socket.socket | None = None
    started: Callable[[], None] | None = None


def role_parts(
    container: Container, role: str, options: PartOptions, *, with_projector: bool = False
) -> list[Part]:
    """The parts of ``role`` (``runtime.roles.ROLES``) on ``container``, in start order."""
    parts = (
        _build_part(container, name, options)
        for name in parts_of(role, with_projector=with_projector)
    )
    return [part for part in parts if part is not None]


def _build_part(container: Container, name: str, options: PartOptions) -> Part | None:
    settings = container.settings
    builders: dict[str, Callable[[], Part | None]] = {
        roles.METRICS: lambda: (
            MetricsServer(
                container.metrics,
                settings.metrics_port,
                settings.metrics_host,
                down=container.health.down,
            )
            if settings.metrics_port
            else None
        ),
        roles.PROJECTOR: container.projector,
        roles.SCHEDULER: container.scheduler_service,
        roles.OUTBOX_RELAY: lambda: relay_part(
            options.services.outbox, container.listen(), container.health.watch(POSTGRESQL)
        ),
        roles.WORKER: lambda: WorkerRunner(container.worker()),
        roles.OUTAGE_PROBE: lambda: OutageProbe(
            container.health, dict(container.probes().values())
        ),
        roles.API: lambda: _api_server(container, options),
    }
    return builders[name]()


def _api_server(container: Container, options: PartOptions) -> Part:
    from jobledger.api.server import ApiServer  # noqa: PLC0415 (see web_app)

    return ApiServer(
        container.api_ports(),
        options.services,
        listener=options.listener,
        started=options.started,
    )


def run_dev(settings: Settings, say: Say, options: DevOptions) -> int:
    """`jobledger dev`: every role in this process, on ``settings``'s stores."""
    wait_for_stores(settings)
    with bootstrap(settings, role="dev") as container:
        preflight(container)
        services = build_services(container)

        def parts(listener: socket.socket, started: Callable[[], None]) -> list[Part]:
            return role_parts(container, "dev", PartOptions(services, listener, started))

        return dev.run_dev(settings, services, parts, say, options)


def preflight(container: Container) -> None:
    """Fail now, in one line, on what would otherwise fail later: a store that misses a
    migration, an unreachable Redis, a handler module that does not import."""
    check_migrated(container.settings)
    container.ping()
    container.handlers()
    # From here on a store that goes away is an outage to ride out, not a reason to exit.
    container.health.expect(*container.dependencies())
