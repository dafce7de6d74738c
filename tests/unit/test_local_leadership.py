"""The embedded mode's leadership: one epoch per start, however many threads ask."""

import contextlib
import threading

from structlog.testing import capture_logs

from jobledger.infra.leadership import LocalLeadership

# How long the first taker waits for a second one to join it inside the store's call.
OVERLAP_SECONDS = 0.5


class SlowEpochs:
    """An epoch counter whose call lasts until a second caller is inside it too (or
    ``OVERLAP_SECONDS`` passed), so two unguarded takers always overlap."""

    def __init__(self) -> None:
        self.taken = 0
        self._lock = threading.Lock()
        self._both_inside = threading.Barrier(2)

    def next_epoch(self, above: int = 0) -> int:
        del above
        # No second caller coming in means the first holds the leadership's lock.
        with contextlib.suppress(threading.BrokenBarrierError):
            self._both_inside.wait(OVERLAP_SECONDS)
        with self._lock:
            self.taken += 1
            return self.taken

    def latest_epoch(self) -> int:
        return self.taken


def test_two_threads_reading_the_epoch_at_start_take_one_epoch() -> None:
    """If the scheduler's tick and its releases loop read the epoch at the same moment
    of the first start, then one epoch is taken from the store, both see it, and
    ``leader.elected`` is logged once."""
    epochs = SlowEpochs()
    leadership = LocalLeadership(epochs)
    seen: list[int] = []
    readers = [threading.Thread(target=lambda: seen.append(leadership.epoch)) for _ in "ab"]
    with capture_logs() as logs:
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
    assert seen == [1, 1]
    assert epochs.taken == 1
    assert [e["leader_epoch"] for e in logs if e["event"] == "leader.elected"] == [1]
