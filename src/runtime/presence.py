"""Which workers are alive, how many slots they use, what they run, and how far their
runs have got.

Each worker reports on every heartbeat; a worker that stopped reporting for three
heartbeats is no longer listed. A run's latest progress is shown here at most once a
second, and expires by itself. Presence is not history, so it lives in Redis (or in
memory in the embedded mode), not in the log.
"""

import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol, cast
from uuid import UUID

import msgspec
import structlog

from jobledger.domain.json_values import UNREADABLE, error_line
from jobledger.projections.redis_client import RedisClient
from jobledger.projections.redis_keys import Keys
from jobledger.schemas.rows import ProgressRow

log = structlog.get_logger(__name__)
_SHOWN_ERROR_CHARS = 200
_EPOCH = datetime.fromtimestamp(0, UTC)


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
                self._served[queue] = max(info.last_heartbeat, self._served.get(queue, _EPOCH))

    def last_served(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._served)

    def leave(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def live(self, *, now: datetime, stale_after: timedelta) -> list[WorkerInfo]:
        with self._lock:
            return _fresh(self._workers.values(), now, stale_after)


class RedisPresence:
    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(WorkerInfo)
        self._progress_decoder = msgspec.json.Decoder(ProgressRow)

    def show_progress(self, execution_id: UUID, progress: ProgressRow, ttl: timedelta) -> None:
        self._client.set(
            self._keys.progress(execution_id),
            self._encoder.encode(progress),
            px=max(int(ttl.total_seconds() * 1000), 1),
        )

    def progress_of(self, execution_id: UUID, *, now: datetime) -> ProgressRow | None:
        del now  # Redis expires the key itself
        raw = self._client.get(self._keys.progress(execution_id))
        if raw is None:
            return None
        try:
            return self._progress_decoder.decode(raw)
        except UNREADABLE as error:
            # Another process wrote it (another release, say): the run is shown without.
            _unreadable("presence.unreadable_progress", error, execution_id=str(execution_id))
            return None

    def report(self, info: WorkerInfo) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(self._keys.workers, info.worker_id, self._encoder.encode(info))
        beat = info.last_heartbeat.timestamp()
        pipe.zadd(self._keys.workers_seen, {info.worker_id: beat})
        if info.queues:
            # GT: a worker whose clock lags never moves a queue's last service back.
            pipe.zadd(self._keys.queues_served, dict.fromkeys(info.queues, beat), gt=True)
        pipe.execute()

    def last_served(self) -> dict[str, datetime]:
        served = cast(
            "list[tuple[bytes | str, float]]",
            self._client.zrange(self._keys.queues_served, 0, -1, withscores=True),
        )
        return {_text(queue): datetime.fromtimestamp(at, UTC) for queue, at in served}

    def leave(self, worker_id: str) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.hdel(self._keys.workers, worker_id)
        pipe.zrem(self._keys.workers_seen, worker_id)
        pipe.execute()

    def live(self, *, now: datetime, stale_after: timedelta) -> list[WorkerInfo]:
        cutoff = (now - stale_after).timestamp()
        # Forget workers that stopped beating long ago, so the hash does not grow.
        gone = self._client.zrangebyscore(self._keys.workers_seen, "-inf", f"({cutoff}")
        if gone:
            self.leave_all([g.decode() if isinstance(g, bytes) else str(g) for g in gone])
        raw = self._client.hgetall(self._keys.workers)
        return _fresh(self._readable(raw), now, stale_after)

    def _readable(self, raw: dict[bytes | str, bytes | str]) -> Iterator[WorkerInfo]:
        """The workers' reports; one another process wrote in a shape this one cannot
        read (another release, a damaged value) is left out, not the whole list."""
        for worker_id, blob in raw.items():
            try:
                yield self._decoder.decode(blob)
            except UNREADABLE as error:
                shown = (
                    worker_id.decode(errors="replace")
                    if isinstance(worker_id, bytes)
                    else worker_id
                )
                _unreadable("presence.unreadable_worker", error, worker_id=shown)

    def leave_all(self, worker_ids: Sequence[str]) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.hdel(self._keys.workers, *worker_ids)
        pipe.zrem(self._keys.workers_seen, *worker_ids)
        pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _unreadable(event: str, error: Exception, **ids: str) -> None:
    log.warning(event, error=error_line(error, max_chars=_SHOWN_ERROR_CHARS), **ids)


def _fresh(
    workers: Iterable[WorkerInfo], now: datetime, stale_after: timedelta
) -> list[WorkerInfo]:
    live = (w for w in workers if now - w.last_heartbeat <= stale_after)
    return sorted(live, key=lambda w: w.worker_id)
