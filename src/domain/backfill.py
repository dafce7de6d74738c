"""Backfill: firing a job's past occurrences in a window, never one that already fired.

The occurrences of ``[start, end]`` are the schedule's (its window, jitter and
exclusions applied as ever: an excluded occurrence stays excluded). Each occurrence
has one execution id, derived from the job and the occurrence, so the plan leaves out
those that already have an execution; a second backfill of the same window finds
nothing to fire, by construction. The overlap mode decides how the rest fire:

- ``allow``: all at once;
- ``buffer_all``: in order, one at a time: the first now (unless an earlier buffered
  backfill's run is still open), each next one when the run before it ended;
- ``skip``: the first now if no run of the job is open, and every other one overlaps
  it and is recorded missed (reason ``overlap``), as a schedule's skip would.

Pure: the caller says which occurrences already fired and what runs are open.
"""

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Final

import msgspec

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.instants import check_instant
from jobledger.domain.policies import BackfillOverlap
from jobledger.domain.schedules import (
    MissedFires,
    Schedule,
    fires_between,
    is_excluded,
)

DEFAULT_MAX: Final = 1000
MAX_BACKFILL: Final = 10_000
_HAIR: Final = timedelta(microseconds=1)


class BackfillPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a backfill does: every part is ascending, and the missing occurrences (not
    fired, not excluded) are split between ``fire``, ``buffer`` and ``skip``."""

    start: datetime
    end: datetime
    overlap: BackfillOverlap
    occurrences: tuple[datetime, ...]
    already_fired: tuple[datetime, ...]  # or waiting in an earlier backfill's buffer
    excluded: tuple[datetime, ...]
    missing: tuple[datetime, ...]
    fire: tuple[datetime, ...] = ()  # fired now
    buffer: tuple[datetime, ...] = ()  # buffer_all: the job's buffer after it, in order
    skip: tuple[datetime, ...] = ()  # recorded missed

    @property
    def waiting(self) -> tuple[datetime, ...]:
        """The buffered occurrences not fired now."""
        return tuple(o for o in self.buffer if o not in self.fire)

    def skipped_runs(self) -> list[MissedFires]:
        """``skip`` as runs of consecutive occurrences (one missed-fires event each)."""
        index = {o: i for i, o in enumerate(self.occurrences)}
        runs: list[list[datetime]] = []
        for occurrence in self.skip:
            if runs and index[runs[-1][-1]] + 1 == index[occurrence]:
                runs[-1].append(occurrence)
            else:
                runs.append([occurrence])
        return [MissedFires(first=run[0], last=run[-1], count=len(run)) for run in runs]


def window_occurrences(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The schedule's occurrences in ``[start, end]``; refuses a window with more than
    ``MAX_BACKFILL`` of them, naming the fix."""
    found = fires_between(schedule, start - _HAIR, end, limit=MAX_BACKFILL + 1)
    if len(found) > MAX_BACKFILL:
        raise InvalidDefinitionError(
            "end",
            f"the window has more than {MAX_BACKFILL} occurrences",
            "backfill a shorter window at a time",
        )
    return found


def plan_backfill(
    schedule: Schedule,
    occurrences: list[datetime],
    *,
    start: datetime,
    end: datetime,
    overlap: BackfillOverlap,
    fired: Collection[datetime],
    buffered: tuple[datetime, ...] = (),
    buffer_busy: bool = False,
    open_runs: int = 0,
) -> BackfillPlan:
    """The plan for ``occurrences`` (``window_occurrences``). ``fired``: those with an
    execution; ``buffered``: those still waiting in the job's buffer (not fired);
    ``buffer_busy``: the buffer's current run is still open; ``open_runs``: the job's
    open runs (for ``skip``)."""
    waiting = set(buffered)
    excluded = tuple(o for o in occurrences if is_excluded(schedule, o))
    done = tuple(o for o in occurrences if o in fired or o in waiting)
    missing = tuple(
        o for o in occurrences if o not in fired and o not in waiting and o not in excluded
    )
    plan = BackfillPlan(
        start=start,
        end=end,
        overlap=overlap,
        occurrences=tuple(occurrences),
        already_fired=done,
        excluded=excluded,
        missing=missing,
    )
    match overlap:
        case BackfillOverlap.ALLOW:
            return msgspec.structs.replace(plan, fire=missing)
        case BackfillOverlap.BUFFER_ALL:
            queue = tuple(sorted(waiting.union(missing)))
            first = () if buffer_busy else queue[:1]
            return msgspec.structs.replace(plan, fire=first, buffer=queue)
        case BackfillOverlap.SKIP:
            first = () if open_runs else missing[:1]
            return msgspec.structs.replace(plan, fire=first, skip=missing[len(first) :])


def check_backfill_window(start: datetime, end: datetime, *, now: datetime, limit: int) -> None:
    """A backfill fills the past: ``start <= end <= now``, and ``limit`` in range."""
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidDefinitionError(
            "start", "start and end need a time zone", "give times like 2026-11-01T00:00:00Z"
        )
    # Within the range a schedule may name: the window's edges are compared and moved.
    check_instant("start", start)
    check_instant("end", end)
    if end < start:
        raise InvalidDefinitionError(
            "end", f"{end.isoformat()} is before start {start.isoformat()}", "give end >= start"
        )
    if end > now:
        raise InvalidDefinitionError(
            "end",
            f"{end.isoformat()} is in the future",
            "backfill the past (end at or before now); the schedule fires what is to come",
        )
    if not 1 <= limit <= MAX_BACKFILL:
        raise InvalidDefinitionError(
            "max", f"{limit} is out of range", f"use from 1 to {MAX_BACKFILL}"
        )
