"""The projector: runs the log followers (queue, checkpoint, read models) under
supervision."""

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog

from jobledger.infra.background import Background
from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import POSTGRESQL, REDIS, DependencyHealth
from jobledger.infra.settings import Settings
from jobledger.persistence.ledger import Ledger
from jobledger.projections.bell import Bell
from jobledger.projections.database import Cursor, Database
from jobledger.projections.log.positions import Positions
from jobledger.projections.log.reader import (
    LOG_CHANNEL,
    Follower,
    Listen,
    Listener,
    LogReader,
    Wakeup,
)
from jobledger.projections.quarantine import (
    CHECKPOINT_FOLLOWER,
    QUEUE_FOLLOWER,
    READ_MODELS_FOLLOWER,
    ApplyOne,
    Isolation,
    Quarantine,
    QuarantineTable,
)
from jobledger.projections.queue.backend import QueueBackend
from jobledger.projections.queue.checkpoint import Checkpoint
from jobledger.projections.queue.gauges import observe_queue
from jobledger.projections.queue.projection import CheckpointProjection, QueueProjection
from jobledger.projections.queue.signal import WorkSignal
from jobledger.projections.read_models.follower import ReadModels
from jobledger.projections.read_models.tables import ReadModelTables

log = structlog.get_logger(__name__)

# The checkpoint is read only by a queue rebuild, which replays the log after it: its
# pages may gather longer than the read models' (a run leased and completed within one
# page costs its row one write, not two).
CHECKPOINT_COALESCE = 0.25
# Under a steady stream of events, the queue's follower starts a page no sooner than
# this after its last one began (ADR 64): a few milliseconds' wait before a run is
# seen, against the per-page cost of reading, checking and writing a page of one.
QUEUE_SPACING = 0.005


class _OpenedOnUse:
    """The projector's own connection to the projection tables: opened by the first
    transaction, so a projector built only for its queue projection opens nothing, and
    closed when the projector stops."""

    def __init__(self, open_database: Callable[[], Database]) -> None:
        self._open = open_database
        self._database: Database | None = None
        self._lock = threading.Lock()

    def _opened(self) -> Database:
        with self._lock:
            if self._database is None:
                self._database = self._open()
            return self._database

    @contextlib.contextmanager
    def transaction(self, *, snapshot: bool = False, pipelined: bool = False) -> Iterator[Cursor]:
        with self._opened().transaction(snapshot=snapshot, pipelined=pipelined) as cursor:
            yield cursor

    def build_indexes(self, statements: Sequence[bytes], *, connections: int) -> None:
        self._opened().build_indexes(statements, connections=connections)

    def close(self) -> None:
        with self._lock:
            if self._database is not None:
                self._database.close()
                self._database = None


class _Gauges(Background):
    """Refreshes the projector's gauges from a thread of its own: each follower's
    position and lag, queue rebuilds, and the queue depths."""

    interval = 1.0

    def __init__(
        self,
        metrics: Metrics,
        ledger: Ledger,
        backend: QueueBackend,
        positions: "_Positions",
        *,
        quarantine: Quarantine,
        health: DependencyHealth,
    ) -> None:
        self._metrics = metrics
        self._health = health
        self._ledger = ledger
        self._backend = backend
        self._positions = positions
        self._quarantine = quarantine
        self._rebuilds = 0
        super().__init__("projector-metrics")

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.observe()
            except Exception as error:  # noqa: BLE001 (a lost database must not end the gauges)
                # An outage is the tracker's to say, once; the followers report its end.
                if self._health.report(error, self._health.clock()) is None:
                    log.warning("projector.metrics_failed", error=str(error))

    def observe(self) -> None:
        metrics = self._metrics
        head = self._ledger.recorder.max_notification_id() or 0
        for name, position in self._positions.read().items():
            metrics.follower_position.labels(follower=name).set(position)
            metrics.follower_lag.labels(follower=name).set(max(head - position, 0))
        rebuilds = self._positions.queue.rebuilds
        # The projection counts in a plain int (projections know no Prometheus).
        metrics.rebuilds.inc(rebuilds - self._rebuilds)
        self._rebuilds = rebuilds
        observe_queue(metrics, self._backend, now=datetime.now(tz=UTC), head=head)
        for name, count in self._quarantine.counts().items():
            metrics.quarantined_events.labels(follower=name).set(count)


@dataclass
class _Positions:
    """Where each follower is in the log, by follower name."""

    queue: QueueProjection
    checkpoint: CheckpointProjection
    read_models: ReadModels

    def read(self) -> dict[str, int]:
        sources: dict[str, Callable[[], int]] = {
            QUEUE_FOLLOWER: lambda: self.queue.position,
            CHECKPOINT_FOLLOWER: lambda: self.checkpoint.position or 0,
            READ_MODELS_FOLLOWER: self.read_models.position,
        }
        return {name: source() for name, source in sources.items()}


@dataclass
class Projector:
    """The queue projection, the checkpoint projection and the read models, each in its
    own follower."""

    queue: QueueProjection
    checkpoint: CheckpointProjection
    followers: list[Follower]
    listener: Listener | None
    wakeups: list[Wakeup] = field(default_factory=list)
    read_models: ReadModels | None = None
    database: Database | None = None  # closed on stop: the projector opened it
    gauges: _Gauges | None = None

    name = "projector"

    @property
    def readers(self) -> list[LogReader]:
        """The readers of the followers' live pages: each keeps a connection while the
        projector runs, so a page pays no pool checkout and no check query (ADR 55)."""
        readers = [self.queue.reader, self.checkpoint.reader]
        if self.read_models is not None:
            readers.append(self.read_models.reader)
        return readers

    def appliers(self) -> dict[str, ApplyOne]:
        """How each follower applies one event without moving (for quarantine retry)."""
        appliers: dict[str, ApplyOne] = {
            QUEUE_FOLLOWER: self.queue.apply_one,
            CHECKPOINT_FOLLOWER: self.checkpoint.apply_one,
        }
        if self.read_models is not None:
            appliers[READ_MODELS_FOLLOWER] = self.read_models.apply_one
        return appliers

    def close(self) -> None:
        """Release what a projector that never started opened (one used for a rebuild
        or a retry)."""
        for reader in self.readers:
            reader.release()
        if self.database is not None:
            self.database.close()

    def start(self) -> None:
        for reader in self.readers:
            reader.hold()
        if self.listener is not None:
            self.listener.start()
        for follower in self.followers:
            follower.start()
        if self.gauges is not None:
            self.gauges.start()
        log.info("projector.started", followers=[f.name for f in self.followers])

    def wait(self, timeout: float | None = None) -> bool:
        """True once any of its loops has ended (none does until it is stopped)."""
        loops: list[Listener | Follower] = [*self.followers]
        if self.listener is not None:
            loops.append(self.listener)
        return any(loop.wait(timeout) for loop in loops)

    def stop(self) -> None:
        if self.gauges is not None:
            self.gauges.stop()
        for follower in self.followers:
            follower.stop()
        if self.listener is not None:
            self.listener.stop()
        for reader in self.readers:
            reader.release()
        if self.database is not None:
            self.database.close()
        log.info("projector.stopped")


def build_projector(
    settings: Settings,
    ledger: Ledger,
    backend: QueueBackend,
    checkpoint: Checkpoint,
    store_id: str,
    *,
    open_database: Callable[[], Database],
    quarantine_table: Callable[[Database], QuarantineTable],
    positions_table: Callable[[Database], Positions],
    read_model_tables: Callable[[Database], ReadModelTables],
    listen: Listen | None = None,
    signal: WorkSignal | None = None,
    read_models_moved: Bell | None = None,
    metrics: Metrics | None = None,
    health: DependencyHealth | None = None,
) -> Projector:
    page = settings.projection_page_size
    poll = settings.projection_poll_ms / 1000
    # The queue follower reads a wake-up at once (it decides when work starts); the
    # read models let events gather in proportion to their last page (a client's wait
    # hears of an end from them), the checkpoint always.
    batch = settings.projection_batch_ms / 1000
    database = _OpenedOnUse(open_database)
    quarantine = Quarantine(quarantine_table(database))
    counted = metrics.count_quarantined if metrics is not None else None

    def isolation(follower: str) -> Isolation:
        isolated = Isolation(follower, quarantine)
        if counted is not None:
            isolated.counted = counted
        return isolated

    queue = QueueProjection(
        ledger,
        backend,
        store_id=store_id,
        checkpoint=checkpoint,
        page_size=page,
        quarantine=quarantine,
        counted=counted,
        signal=signal,
    )
    checkpoint_projection = CheckpointProjection(
        ledger, checkpoint, page_size=page, isolation=isolation(CHECKPOINT_FOLLOWER)
    )
    read_models = ReadModels(
        ledger,
        database,
        positions=positions_table(database),
        tables=read_model_tables(database),
        page_size=page,
        isolation=isolation(READ_MODELS_FOLLOWER),
        moved=read_models_moved,
    )
    wakeups = [Wakeup(), Wakeup(), Wakeup()]
    health = health or DependencyHealth("projector")
    # The stores each follower's step talks to: a step that went through reached them.
    stores = _stores(settings)
    tables = health.watch(*(name for name in stores if name == POSTGRESQL))
    followers = [
        Follower(
            QUEUE_FOLLOWER,
            queue.step,
            wakeups[0],
            poll_interval=poll,
            spacing=QUEUE_SPACING,
            health=health.watch(*stores),
        ),
        Follower(
            CHECKPOINT_FOLLOWER,
            checkpoint_projection.step,
            wakeups[1],
            poll_interval=poll,
            coalesce=max(batch, CHECKPOINT_COALESCE),
            health=tables,
        ),
        Follower(
            READ_MODELS_FOLLOWER,
            read_models.step,
            wakeups[2],
            poll_interval=poll,
            coalesce=functools.partial(read_models.gather, batch),
            health=tables,
        ),
    ]
    listener = None if listen is None else listen(LOG_CHANNEL, wakeups, health=tables)
    gauges = None
    if metrics is not None:
        positions = _Positions(queue, checkpoint_projection, read_models)
        gauges = _Gauges(metrics, ledger, backend, positions, quarantine=quarantine, health=health)
    return Projector(
        queue, checkpoint_projection, followers, listener, wakeups, read_models, database, gauges
    )


def _stores(settings: Settings) -> tuple[str, ...]:
    """(the log's server, then Redis), each only if this deployment has it."""
    used = ((POSTGRESQL, settings.uses_postgres), (REDIS, bool(settings.redis_url)))
    return tuple(name for name, present in used if present)
