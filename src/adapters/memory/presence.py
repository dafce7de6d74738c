"""Presence in process memory, for the embedded mode: one process, so no sharing."""

import threading
from datetime import datetime, timedelta
from uuid import UUID

from jobledger.infra.presence import EPOCH, WorkerInfo, fresh
from jobledger.schemas.rows import ProgressRow


class MemoryPresence:
    def __init__(self) -> None:
        self._workers: dict[str, WorkerInfo] = {}
        self._progress: dict[UUID, tuple[ProgressRow, datetime]] = {}
        self._served: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def show_progress(self, execution_id: UUID, progress: ProgressRow, ttl: timedelta) -> None:
        with self._lock:
            self._progress[execution_id] = (progress, progress.at + ttl)
            # Forget what expired, so the map holds the running ones only.
            self._progress = {
                run: shown for run, shown in self._progress.items() if shown[1] > progress.at
            }

    def progress_of(self, execution_id: UUID, *, now: datetime) -> ProgressRow | None:
        with self._lock:
            shown = self._progress.get(execution_id)
        return shown[0] if shown is not None and shown[1] > now else None

    def report(self, info: WorkerInfo) -> None:
        with self._lock:
            self._workers[info.worker_id] = info
            for queue in info.queues:
                self._served[queue] = max(info.last_heartbeat, self._served.get(queue, EPOCH))

    def last_served(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._served)

    def leave(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def live(self, *, now: datetime, stale_after: timedelta) -> list[WorkerInfo]:
        with self._lock:
            return fresh(self._workers.values(), now, stale_after)
