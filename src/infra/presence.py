"""Which workers are alive, how many slots they use, what they run, and how far their
runs have got.

Each worker reports on every heartbeat; a worker that stopped reporting for three
heartbeats is no longer listed. A run's latest progress is shown here at most once a
second, and expires by itself. Presence is not history, so it lives in Redis (or in
memory in the embedded mode), not in the log.
"""

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Protocol
from uuid import UUID

import msgspec
import structlog

from jobledger.domain.json_values import error_line
from jobledger.schemas.rows import ProgressRow

log = structlog.get_logger(__name__)
_SHOWN_ERROR_CHARS = 200
EPOCH = datetime.fromtimestamp(0, UTC)


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    queues: tuple[str, ...]
    slots: int
    running: tuple[UUID, ...]
    last_heartbeat: datetime


class Presence(Protocol):
    def report(self, info: WorkerInfo) -> None: ...
    def leave(self, worker_id: str) -> None: ...
    def live(self, *, now: datetime, stale_after: timedelta) -> list[WorkerInfo]: ...
    def last_served(self) -> dict[str, datetime]: ...
    def show_progress(self, execution_id: UUID, progress: ProgressRow, ttl: timedelta) -> None: ...
    def progress_of(self, execution_id: UUID, *, now: datetime) -> ProgressRow | None: ...


def unreadable(event: str, error: Exception, **ids: str) -> None:
    log.warning(event, error=error_line(error, max_chars=_SHOWN_ERROR_CHARS), **ids)


def fresh(workers: Iterable[WorkerInfo], now: datetime, stale_after: timedelta) -> list[WorkerInfo]:
    live = (w for w in workers if now - w.last_heartbeat <= stale_after)
    return sorted(live, key=lambda w: w.worker_id)
