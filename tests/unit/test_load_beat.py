"""A queue rebuild's loader beats while it loads, through outages of the store."""

import threading
import time

import pytest
import redis

from jobledger.projections.queue import projection as queue_projection
from jobledger.projections.queue.projection import _LoadBeat


class _FlakyStore:
    """Counts beats; the first ``failures`` of them fail as an unreachable Redis does."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.beats: list[str] = []
        self.lock = threading.Lock()

    def stamp_load(self, *, epoch: str) -> bool:
        with self.lock:
            if self.failures:
                self.failures -= 1
                raise redis.ConnectionError("connection refused")
            self.beats.append(epoch)
            return True


def test_the_beat_goes_on_through_an_outage_and_stops_with_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the store cannot be reached for the first beats, then the beat thread neither
    dies nor raises into the load: it beats again once the store answers, and stops
    when the load ends."""
    monkeypatch.setattr(queue_projection, "LOAD_BEAT", 0.01)
    store = _FlakyStore(failures=3)
    with _LoadBeat(store, "e1"):  # type: ignore[arg-type] # a store with stamp_load alone
        deadline = time.monotonic() + 5
        while len(store.beats) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert store.failures == 0
    assert store.beats[:3] == ["e1"] * 3
    after = len(store.beats)
    time.sleep(0.05)
    assert len(store.beats) == after  # stopped with the load
