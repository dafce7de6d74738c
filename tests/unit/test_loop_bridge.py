"""The future bridge: thread-pool futures awaited from a loop, one wake-up per burst."""

import asyncio
import concurrent.futures
import threading
import time

import pytest

from jobledger.runtime.loop_bridge import FutureBridge


def test_a_burst_of_completions_wakes_the_loop_once() -> None:
    """If many futures complete in another thread while the loop is busy, then every
    waiter gets its own result, and the loop is woken once for all of them."""

    async def main() -> tuple[list[int], int]:
        bridge = FutureBridge(asyncio.get_running_loop())
        futures: list[concurrent.futures.Future[int]] = [
            concurrent.futures.Future() for _ in range(100)
        ]
        waiters = [bridge.wait(future) for future in futures]

        def complete() -> None:
            for number, future in enumerate(futures):
                future.set_result(number)

        completing = threading.Thread(target=complete)
        completing.start()
        completing.join()  # the loop is held here, as by a busy step
        return list(await asyncio.gather(*waiters)), bridge.wake_ups

    results, wake_ups = asyncio.run(main())
    assert results == list(range(100))
    assert wake_ups == 1


def test_errors_and_cancellations_reach_their_waiters() -> None:
    """If a future fails or is cancelled, then its waiter raises that error or is
    cancelled, and the other waiters of the same burst get their results."""

    async def main() -> None:
        bridge = FutureBridge(asyncio.get_running_loop())
        failed: concurrent.futures.Future[str] = concurrent.futures.Future()
        cancelled: concurrent.futures.Future[str] = concurrent.futures.Future()
        fine: concurrent.futures.Future[str] = concurrent.futures.Future()
        waiters = [bridge.wait(f) for f in (failed, cancelled, fine)]
        failed.set_exception(KeyError("lost"))
        cancelled.cancel()
        fine.set_result("saved")
        outcomes = await asyncio.gather(*waiters, return_exceptions=True)
        assert isinstance(outcomes[0], KeyError)
        assert isinstance(outcomes[1], asyncio.CancelledError)
        assert outcomes[2] == "saved"

    asyncio.run(main())


def test_a_future_done_before_the_wait_settles_at_once() -> None:
    """If the future is already done when it is waited for, then the waiter settles in
    the loop's next pass with its result."""

    async def main() -> str:
        bridge = FutureBridge(asyncio.get_running_loop())
        done: concurrent.futures.Future[str] = concurrent.futures.Future()
        done.set_result("early")
        return await asyncio.wait_for(bridge.wait(done), timeout=5)

    assert asyncio.run(main()) == "early"


def test_a_cancelled_waiter_leaves_its_future_alone() -> None:
    """If the task awaiting a save is cancelled, then the save's future is not cancelled
    (the writer still saves it), and its later completion is dropped quietly."""

    async def main() -> concurrent.futures.Future[str]:
        bridge = FutureBridge(asyncio.get_running_loop())
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        task = asyncio.ensure_future(bridge.wait(future))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not future.cancelled()
        completing = threading.Thread(target=future.set_result, args=("saved",))
        completing.start()
        # The hand-over was queued before this task's resumption is.
        await asyncio.to_thread(completing.join)
        assert bridge.wake_ups == 1
        return future

    future = asyncio.run(main())
    assert future.result() == "saved"


def test_completions_after_a_hand_over_are_not_lost() -> None:
    """If futures keep completing in another thread while earlier ones are handed over,
    then every waiter settles (none waits for a wake-up that never comes)."""

    async def main() -> int:
        bridge = FutureBridge(asyncio.get_running_loop())
        futures: list[concurrent.futures.Future[int]] = [
            concurrent.futures.Future() for _ in range(2_000)
        ]
        waiters = [bridge.wait(future) for future in futures]

        def complete() -> None:
            for number, future in enumerate(futures):
                future.set_result(number)
                if number % 50 == 0:
                    time.sleep(0.001)

        threading.Thread(target=complete).start()
        results = await asyncio.wait_for(asyncio.gather(*waiters), timeout=30)
        return sum(results)

    assert asyncio.run(main()) == sum(range(2_000))


def test_one_future_waited_twice_and_an_odd_error_leave_no_waiter_hanging() -> None:
    """If the same future is waited for twice, or a future fails with an error asyncio
    will not carry (StopIteration), then every waiter of the burst still settles: both
    waiters of the one future get its result, the odd error's waiter raises."""

    async def main() -> None:
        bridge = FutureBridge(asyncio.get_running_loop())
        shared: concurrent.futures.Future[str] = concurrent.futures.Future()
        odd: concurrent.futures.Future[str] = concurrent.futures.Future()
        after: concurrent.futures.Future[str] = concurrent.futures.Future()
        waiters = [bridge.wait(shared), bridge.wait(shared), bridge.wait(odd), bridge.wait(after)]
        shared.set_result("saved")
        odd.set_exception(StopIteration())
        after.set_result("next")
        outcomes = await asyncio.wait_for(
            asyncio.gather(*waiters, return_exceptions=True), timeout=5
        )
        assert outcomes[:2] == ["saved", "saved"]
        assert isinstance(outcomes[2], RuntimeError)
        assert outcomes[3] == "next"

    asyncio.run(main())
