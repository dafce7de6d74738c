"""A follower's pacing: after a step that did work the next waits out the spacing; after
a quiet step, a wake-up is answered at once."""

import itertools
import threading
import time
from collections.abc import Callable

from jobledger.projections.log.reader import Follower, Wakeup

# Scheduling on a busy machine can delay a thread by tens of milliseconds: the bounds
# below leave that much room on the side a delay moves them.
SLACK = 0.15


class Steps:
    """A step that records when each call began and answers from ``busy`` in turn."""

    def __init__(self, busy: list[bool], duration: float = 0.0) -> None:
        self.busy = busy
        self.duration = duration
        self.began: list[float] = []
        self.done = threading.Event()

    def __call__(self) -> bool:
        self.began.append(time.monotonic())
        if self.duration:
            time.sleep(self.duration)
        if len(self.began) >= len(self.busy):
            self.done.set()
            return False
        return self.busy[len(self.began) - 1]


def run(
    steps: Steps,
    wakeup: Wakeup,
    spacing: float,
    during: Callable[[], None],
    coalesce: float | Callable[[], float] = 0.0,
) -> None:
    follower = Follower(
        "queue-projection",
        steps,
        wakeup,
        poll_interval=5.0,
        spacing=spacing,
        coalesce=coalesce,
    )
    follower.start()
    try:
        during()
        assert steps.done.wait(5)
    finally:
        follower.stop()


def gaps(began: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(began)]


def test_steps_that_did_work_start_a_spacing_apart() -> None:
    """If every step finds work and takes less than the spacing, then each next step
    starts no sooner than the spacing after the last one began."""
    steps = Steps([True, True, True, True])
    run(steps, Wakeup(), 0.1, lambda: None)
    assert len(steps.began) == 4
    assert all(gap >= 0.1 for gap in gaps(steps.began)), gaps(steps.began)


def test_a_step_longer_than_the_spacing_is_followed_at_once() -> None:
    """If a step that did work took longer than the spacing, then the next one starts
    as soon as it ends: a follower catching up on full pages is not slowed."""
    steps = Steps([True, True, True], duration=0.2)
    run(steps, Wakeup(), 0.05, lambda: None)
    assert all(0.2 <= gap < 0.2 + SLACK for gap in gaps(steps.began)), gaps(steps.began)


def test_a_wake_up_after_a_quiet_step_is_answered_at_once() -> None:
    """If a step found nothing and a wake-up comes soon after, then the next step starts
    at once, not a spacing after the quiet one began: the first event after a quiet
    spell waits for nothing."""
    steps = Steps([False, False])
    wakeup = Wakeup()
    woken: list[float] = []

    def wake_soon() -> None:
        time.sleep(0.05)
        woken.append(time.monotonic())
        wakeup.set()

    run(steps, wakeup, 1.0, wake_soon)
    assert len(steps.began) == 2
    assert steps.began[1] - woken[0] < SLACK
    assert steps.began[1] - steps.began[0] < 1.0


def test_a_gathering_window_asked_at_each_wake_up() -> None:
    """If the window to gather is a callable, then it is asked at each wake-up after a
    quiet step, and the next step starts no sooner than its answer after the wake-up:
    at once for a short answer, after it for a long one."""
    steps = Steps([False, False, False])
    wakeup = Wakeup()
    answers = iter([0.0, 0.3])
    woken: list[float] = []

    def wake_twice() -> None:
        for _ in range(2):
            time.sleep(0.05)
            woken.append(time.monotonic())
            wakeup.set()
            time.sleep(0.05)

    run(steps, wakeup, 0.0, wake_twice, coalesce=lambda: next(answers, 0.0))
    assert steps.began[1] - woken[0] < SLACK
    assert steps.began[2] - woken[1] >= 0.3
