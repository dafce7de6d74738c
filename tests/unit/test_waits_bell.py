"""A long-poll hears of a run's end when the read models ring, not at its next poll."""

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from jobledger.adapters.memory.bell import MemoryBell
from jobledger.projections.read_models.follower import MOVED
from jobledger.services.waits import ExecutionWaits

if TYPE_CHECKING:
    from jobledger.services.views import Views


class Statuses:
    """The read model's statuses, as the test sets them (the one read the poller makes)."""

    def __init__(self) -> None:
        self.rows: dict[uuid.UUID, tuple[str, int]] = {}
        self.reads = 0

    def statuses(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        self.reads += 1
        return {i: self.rows[i] for i in ids if i in self.rows}


def test_a_ring_of_the_read_models_wakes_a_waiter_before_its_poll() -> None:
    """If the read models ring after the awaited run ended, then the waiter hears of it
    at once, though its poll would come only after half a minute."""
    run = uuid.uuid4()
    views, bell = Statuses(), MemoryBell()
    waits = ExecutionWaits(cast("Views", views), interval=30.0, moved=bell)

    async def scenario() -> float:
        waiting = asyncio.create_task(waits.until_finished(run, within=10))
        await asyncio.sleep(0.2)  # the poller listened (one read) and now waits
        views.rows[run] = ("completed", 3)
        started = time.monotonic()
        bell.ring(MOVED)
        assert await waiting
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 2


def test_a_ring_of_something_else_reads_nothing() -> None:
    """If a bell rings a name the waits do not listen for, then the poller reads
    nothing more and its waiter keeps waiting."""
    run = uuid.uuid4()
    views, bell = Statuses(), MemoryBell()
    waits = ExecutionWaits(cast("Views", views), interval=30.0, moved=bell)

    async def scenario() -> bool:
        waiting = asyncio.create_task(waits.until_finished(run, within=0.5))
        await asyncio.sleep(0.2)
        reads = views.reads
        views.rows[run] = ("completed", 3)
        bell.ring({"mail"})
        await asyncio.sleep(0.1)
        assert views.reads == reads
        return await waiting

    assert not asyncio.run(scenario())


class Details(Statuses):
    """Statuses, and a run's whole detail, counted: what a long-poll reads."""

    def __init__(self) -> None:
        super().__init__()
        self.details = 0

    def execution_detail(self, execution_id: uuid.UUID) -> object:
        self.details += 1
        return SimpleNamespace(execution=SimpleNamespace(status=self.rows[execution_id][0]))


def test_a_long_poll_on_an_open_run_reads_its_detail_once_it_ended() -> None:
    """If a run is still open when a long-poll begins, then only its status is read
    before the wait, and its whole detail once, after it ended."""
    run = uuid.uuid4()
    views, bell = Details(), MemoryBell()
    views.rows[run] = ("running", 2)
    waits = ExecutionWaits(cast("Views", views), interval=30.0, moved=bell)

    async def scenario() -> object:
        waiting = asyncio.create_task(waits.detail(run, wait=10))
        await asyncio.sleep(0.2)
        assert views.details == 0
        views.rows[run] = ("completed", 3)
        bell.ring(MOVED)
        return await waiting

    assert asyncio.run(scenario()).execution.status == "completed"  # type: ignore[attr-defined]
    assert views.details == 1
