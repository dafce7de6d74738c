"""The projector: runs the log followers (queue, checkpoint, read models) under
supervision."""

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import structlog

from jobledger.domain.ledger import Ledger
from jobledger.projections.checkpoint import Checkpoint
from jobledger.projections.database import Cursor, Database
from jobledger.projections.log import Follower, PostgresListener, Wakeup
from jobledger.projections.queue import QueueBackend
from jobledger.projections.queue_projection import CheckpointProjection, QueueProjection
from jobledger.projections.read_models import ReadModels
from jobledger.runtime.settings import Settings
from jobledger.runtime.store import projection_database

log = structlog.get_logger(__name__)


class _OpenedOnUse:
    """The projector's own connection to the projection tables: opened by the first
    transaction, so a projector built only for its queue projection opens nothing, and
    closed when the projector stops."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._database: Database | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def transaction(self, *, snapshot: bool = False) -> Iterator[Cursor]:
        with self._lock:
            if self._database is None:
                self._database = projection_database(self._settings)
            database = self._database
        with database.transaction(snapshot=snapshot) as cursor:
            yield cursor

    def close(self) -> None:
        with self._lock:
            if self._database is not None:
                self._database.close()
                self._database = None


@dataclass
class Projector:
    """The queue projection, the checkpoint projection and the read models, each in its
    own follower."""

    queue: QueueProjection
    checkpoint: CheckpointProjection
    followers: list[Follower]
    listener: PostgresListener | None
    wakeups: list[Wakeup] = field(default_factory=list)
    read_models: ReadModels | None = None
    database: Database | None = None  # closed on stop: the projector opened it

    def start(self) -> None:
        if self.listener is not None:
            self.listener.start()
        for follower in self.followers:
            follower.start()
        log.info("projector.started", followers=[f.name for f in self.followers])

    def stop(self) -> None:
        for follower in self.followers:
            follower.stop()
        if self.listener is not None:
            self.listener.stop()
        if self.database is not None:
            self.database.close()
        log.info("projector.stopped")


def build_projector(
    settings: Settings,
    ledger: Ledger,
    backend: QueueBackend,
    checkpoint: Checkpoint,
    store_id: str,
) -> Projector:
    page = settings.projection_page_size
    poll = settings.projection_poll_ms / 1000
    # The queue follower reads at once (it decides when work starts); the others may wait.
    batch = settings.projection_batch_ms / 1000
    queue = QueueProjection(
        ledger, backend, store_id=store_id, checkpoint=checkpoint, page_size=page
    )
    checkpoint_projection = CheckpointProjection(ledger, checkpoint, page_size=page)
    database = _OpenedOnUse(settings)
    read_models = ReadModels(ledger, database, page_size=page)
    wakeups = [Wakeup(), Wakeup(), Wakeup()]
    followers = [
        Follower("queue-projection", queue.step, wakeups[0], poll_interval=poll),
        Follower(
            "checkpoint-projection",
            checkpoint_projection.step,
            wakeups[1],
            poll_interval=poll,
            coalesce=batch,
        ),
        Follower("read-models", read_models.step, wakeups[2], poll_interval=poll, coalesce=batch),
    ]
    listener = None
    if settings.uses_postgres:
        listener = PostgresListener(settings.database_url, "jobledger_events", wakeups)
    return Projector(
        queue, checkpoint_projection, followers, listener, wakeups, read_models, database
    )
