"""Progress a handler reports, through a real worker on the embedded stores and a clock
the test moves: shown live at most once a second, recorded in the log when it is new,
and never written after the run was cancelled."""

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import actor
from tests.integration.test_worker_in_process import POLL, Clock, InProcess, in_process

from jobledger.domain.execution import Execution, ExecutionStatus
from jobledger.domain.progress import ProgressPolicy
from jobledger.runtime.handlers.base import HandlerContext
from jobledger.runtime.handlers.builtin import BUILTIN
from jobledger.runtime.handlers.registry import HandlerRegistry
from jobledger.runtime.worker import Worker, WorkerConfig
from jobledger.services.executions import Executions

STEPPER = "test.stepper"


class Stepper:
    """A handler that reports what the test tells it to, when it tells it to."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.steps: asyncio.Queue[tuple[float, float | None, str] | None] = asyncio.Queue()
        self.done: asyncio.Queue[None] = asyncio.Queue()

    async def __call__(self, context: HandlerContext) -> dict[str, Any]:
        while (step := await self.steps.get()) is not None:
            seconds, percent, message = step
            self.clock.advance(timedelta(seconds=seconds))
            await context.progress(percent, message, {"at": seconds})
            self.done.put_nowait(None)
        return {}

    async def report(self, seconds: float, percent: float | None, message: str) -> None:
        await self.steps.put((seconds, percent, message))
        await asyncio.wait_for(self.done.get(), 10)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[InProcess]:
    with in_process(tmp_path) as made:
        yield made


def _worker(embedded: InProcess, stepper: Stepper) -> Worker:
    container = embedded.container
    return Worker(
        container.ledger,
        container.writer,
        container.queue,
        HandlerRegistry({**BUILTIN, STEPPER: stepper}),
        config=WorkerConfig(idle_poll=POLL, progress=ProgressPolicy()),
        now=embedded.clock,
        presence=container.presence,
    )


def _progressed(embedded: InProcess, execution_id: uuid.UUID) -> list[Execution.Progressed]:
    return [e for e in embedded.events(execution_id) if isinstance(e, Execution.Progressed)]


def test_reports_are_shown_live_each_second_and_recorded_when_new(embedded: InProcess) -> None:
    """If a handler reports eight times over 14 s with two messages, then live views
    show the latest report at most a second old, and the log records only the first,
    the one with a new message and one ten seconds later: three events, in order,
    before the completion."""
    stepper = Stepper(embedded.clock)
    presence = embedded.container.presence

    async def scenario() -> None:
        execution = embedded.run(STEPPER)
        async with embedded.running(_worker(embedded, stepper)):
            await embedded.until(lambda: embedded.status(execution.id) is ExecutionStatus.RUNNING)
            script = [
                (0, 10, "loading", 10),  # the first: shown, recorded
                (0.5, 20, "loading", 10),  # within a second: not shown, not recorded
                (1.0, 30, "loading", 30),  # shown, not recorded
                (0.2, 40, "writing", 30),  # a new message: recorded, not shown
                (1.0, 50, "writing", 50),
                (5.0, 60, "writing", 60),
                (5.0, 70, "writing", 70),  # ten seconds after "writing" began: recorded
                (1.0, None, "writing", None),  # unknown again
            ]
            for seconds, percent, message, live in script:
                await stepper.report(seconds, percent, message)
                shown = presence.progress_of(execution.id, now=embedded.clock())
                assert shown is not None
                assert shown.percent == live
            await stepper.steps.put(None)
            await embedded.until(
                lambda: embedded.status(execution.id) is ExecutionStatus.COMPLETED, follow=False
            )
        recorded = _progressed(embedded, execution.id)
        assert [(e.progress.percent, e.progress.message) for e in recorded] == [
            (10, "loading"),
            (40, "writing"),
            (70, "writing"),
        ]
        assert recorded[1].progress.data == {"at": 0.2}
        names = embedded.names(execution.id)
        assert names[-1] == "Completed"
        assert (
            embedded.container.ledger.get_execution(execution.id).progress == recorded[-1].progress
        )

    asyncio.run(scenario())


def test_a_run_cancelled_while_it_reports_ends_cancelled_with_nothing_after(
    embedded: InProcess,
) -> None:
    """If a run is cancelled while its handler goes on reporting, then the report that
    comes after the cancellation is not written, the worker records the run as
    cancelled, and the log holds no event after ExecutionCancelled."""
    _cancel_between_reports(embedded, ["cancelled meanwhile"])


def test_after_a_report_that_could_not_be_saved_no_later_one_is_written(
    embedded: InProcess,
) -> None:
    """If a report's save fails because the run was cancelled meanwhile, then the
    worker's copy is a version ahead of the log: a later report from that copy must
    not land after the cancellation (it would number right behind it), so the log
    still ends with ExecutionCancelled."""
    _cancel_between_reports(
        embedded, ["conflicts with the cancellation", "from the copy a version ahead"]
    )


def _cancel_between_reports(embedded: InProcess, later: list[str]) -> None:
    """One report, a cancellation, then ``later`` reports: only the first is written."""
    stepper = Stepper(embedded.clock)

    async def scenario() -> None:
        execution = embedded.run(STEPPER)
        async with embedded.running(_worker(embedded, stepper)):
            await embedded.until(lambda: embedded.status(execution.id) is ExecutionStatus.RUNNING)
            await stepper.report(0, 10, "loading")
            Executions(embedded.container.ledger).cancel(execution.id, by=actor(), reason="stop")
            for percent, message in enumerate(later, start=2):
                await stepper.report(0, percent * 10, message)
            await stepper.steps.put(None)
            await embedded.until(lambda: not embedded.container.queue.items("default"))
        names = embedded.names(execution.id)
        assert names[-1] == "Cancelled", names
        assert [e.progress.percent for e in _progressed(embedded, execution.id)] == [10]

    asyncio.run(scenario())
