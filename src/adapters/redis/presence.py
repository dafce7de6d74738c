"""Presence in Redis: every worker's report and every run's latest progress, shared by
all processes, expiring by themselves (the keys of ``adapters.redis.keys``)."""

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import cast
from uuid import UUID

import msgspec

from jobledger.adapters.redis.client import RedisClient
from jobledger.adapters.redis.keys import Keys
from jobledger.domain.json_values import UNREADABLE
from jobledger.infra.presence import WorkerInfo, fresh, unreadable
from jobledger.schemas.rows import ProgressRow


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
            unreadable("presence.unreadable_progress", error, execution_id=str(execution_id))
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
        return fresh(self._readable(raw), now, stale_after)

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
                unreadable("presence.unreadable_worker", error, worker_id=shown)

    def leave_all(self, worker_ids: Sequence[str]) -> None:
        pipe = self._client.pipeline(transaction=True)
        pipe.hdel(self._keys.workers, *worker_ids)
        pipe.zrem(self._keys.workers_seen, *worker_ids)
        pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
