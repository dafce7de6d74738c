"""Running a role's parts: what the process does once they have started."""

import gc
import threading
from collections.abc import Iterator

import pytest

from jobledger.runtime.lifecycle import EXIT_PART_ENDED, YOUNG_COLLECTION_AFTER, run_parts


class Ended:
    """A part that ends as soon as it has started."""

    name = "ended"

    def __init__(self) -> None:
        self.frozen_at_start = -1

    def start(self) -> None:
        self.frozen_at_start = gc.get_freeze_count()

    def stop(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        del timeout
        return True


@pytest.fixture
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("unfrozen")
def test_a_started_role_takes_its_heap_out_of_the_collectors_passes() -> None:
    """If a role's parts have started, then the objects alive then are frozen (a full
    collection no longer walks them), and not before the parts started."""
    part = Ended()
    assert run_parts([part], threading.Event()) == EXIT_PART_ENDED
    assert part.frozen_at_start == 0
    assert gc.get_freeze_count() > 0


@pytest.mark.usefixtures("unfrozen")
def test_a_started_role_collects_its_youngest_objects_less_often() -> None:
    """If a role's parts have started, then the youngest generation is collected only
    after YOUNG_COLLECTION_AFTER net allocations; the older generations' thresholds
    stay as they were."""
    before = gc.get_threshold()
    assert run_parts([Ended()], threading.Event()) == EXIT_PART_ENDED
    assert gc.get_threshold() == (YOUNG_COLLECTION_AFTER, *before[1:])
