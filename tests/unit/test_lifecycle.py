"""Running a role's parts: what the process does once they have started."""

import gc
import threading
from collections.abc import Iterator

import pytest

from jobledger.runtime.lifecycle import EXIT_PART_ENDED, run_parts


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
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_a_started_role_takes_its_heap_out_of_the_collectors_passes() -> None:
    """If a role's parts have started, then the objects alive then are frozen (a full
    collection no longer walks them), and not before the parts started."""
    part = Ended()
    assert run_parts([part], threading.Event()) == EXIT_PART_ENDED
    assert part.frozen_at_start == 0
    assert gc.get_freeze_count() > 0
