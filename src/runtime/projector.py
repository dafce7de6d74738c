"""The projector: runs the log followers (queue and checkpoint) under supervision."""

from dataclasses import dataclass, field

import structlog

from jobledger.domain.ledger import Ledger
from jobledger.projections.checkpoint import Checkpoint
from jobledger.projections.log import Follower, PostgresListener, Wakeup
from jobledger.projections.queue import QueueBackend
from jobledger.projections.queue_projection import CheckpointProjection, QueueProjection
from jobledger.runtime.settings import Settings

log = structlog.get_logger(__name__)


@dataclass
class Projector:
    """The queue projection and the checkpoint projection, each in its own follower."""

    queue: QueueProjection
    checkpoint: CheckpointProjection
    followers: list[Follower]
    listener: PostgresListener | None
    wakeups: list[Wakeup] = field(default_factory=list)

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
    queue = QueueProjection(
        ledger, backend, store_id=store_id, checkpoint=checkpoint, page_size=page
    )
    checkpoint_projection = CheckpointProjection(ledger, checkpoint, page_size=page)
    wakeups = [Wakeup(), Wakeup()]
    followers = [
        Follower("queue-projection", queue.step, wakeups[0], poll_interval=poll),
        Follower(
            "checkpoint-projection", checkpoint_projection.step, wakeups[1], poll_interval=poll
        ),
    ]
    listener = None
    if settings.uses_postgres:
        listener = PostgresListener(settings.database_url, "jobledger_events", wakeups)
    return Projector(queue, checkpoint_projection, followers, listener, wakeups)
