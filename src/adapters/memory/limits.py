"""Limits in the memory queue: the structures and steps of lease.lua, in Python.

One ``QueueLimits`` per queue keeps what the Redis queue keeps under a queue's
``lim`` keys (see ``redis_keys``): each entry's limits, the entries leased per
concurrency key, the starts per rate key, the entries set aside per limit (scored by
priority band, then ready time, as in Redis), the limits to look at again, and the
entries already reported as throttled. The caller holds the queue's lock.
"""

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from uuid import UUID

from jobledger.projections.queue.backend import (
    LIMIT_KINDS,
    EntryLimits,
    LimitCloser,
    LimitUsage,
    NamedLimit,
    enforced,
)

SPAN = 2**42  # a waiting entry's score: (9 - priority) * SPAN + its ready score
MAX_SET_ASIDE = 1000  # entries set aside per lease round at most (as lease.lua)
FULL = 2**62  # the use of a limit a rebuild closed
SKEW = 1000  # ms two callers' clocks may differ by for rate windows to hold

# (score, execution id as text, execution id), as the memory queue's ready lists.
_Waiting = tuple[int, str, UUID]


@dataclass
class Verdict:
    """Whether an entry may lease now: ``member`` names the limit it is over (None:
    it may), ``wake_at`` when to look again (None: when a slot frees)."""

    member: str | None = None
    wake_at: int | None = None


@dataclass
class QueueLimits:
    entries: dict[UUID, EntryLimits] = field(default_factory=dict)
    running: dict[str, set[UUID]] = field(default_factory=dict)
    starts: dict[str, list[int]] = field(default_factory=dict)
    closed: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, list[_Waiting]] = field(default_factory=dict)
    aside: dict[UUID, tuple[str, _Waiting]] = field(default_factory=dict)
    wake: dict[str, int] = field(default_factory=dict)
    noted: set[UUID] = field(default_factory=set)
    vals: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)

    # ---- what apply, ack and release change -----------------------------------------

    def place(self, eid: UUID, limits: EntryLimits | None, *, leased: bool) -> None:
        """The entry was (re)written with ``limits``; a leased one holds its slot."""
        if limits is None:
            self.entries.pop(eid, None)
            return
        self.entries[eid] = limits
        if leased and limits.concurrency_key is not None:
            self.running.setdefault(limits.concurrency_key, set()).add(eid)

    def unlink(self, eid: UUID) -> bool:
        """The entry leaves its place: its slot frees, and it stops waiting. True if it
        was waiting (so it was in no ready list)."""
        self.free(eid)
        found = self.aside.pop(eid, None)
        if found is None:
            return False
        member, slot = found
        waiting = self.waiting[member]
        del waiting[bisect.bisect_left(waiting, slot)]
        return True

    def free(self, eid: UUID) -> None:
        limits = self.entries.get(eid)
        key = None if limits is None else limits.concurrency_key
        if key is not None and eid in self.running.get(key, ()):
            self.running[key].discard(eid)
            self.wake[f"c:{key}"] = 0

    def forget(self, eid: UUID) -> None:
        """The entry is gone (finished)."""
        self.entries.pop(eid, None)
        self.noted.discard(eid)

    def close(self, now: int) -> None:
        """After a rebuild: hold the limits of the loaded entries full for a while (see
        ``LimitCloser``)."""
        closer = LimitCloser()
        for limits in self.entries.values():
            closer.add(limits)
        for member, until in closer.closed(now).items():
            self.closed[member] = until
            self.wake[member] = until + 1

    # ---- what a lease round does ----------------------------------------------------

    def verdict(self, eid: UUID, now: int, named: Mapping[str, NamedLimit]) -> Verdict:
        limits = self.entries.get(eid)
        if limits is None:
            return Verdict()
        ckey, rkey = limits.concurrency_key, limits.rate_key
        if ckey is not None:
            self.vals[f"c:{ckey}"] = (limits.concurrency_max, None)
            most, _ = enforced(named.get(ckey), "c", limits.concurrency_max, None)
            if most is not None and self._held(ckey, now) >= most:
                return Verdict(f"c:{ckey}", self._closed_until(f"c:{ckey}", now))
        if rkey is not None:
            self.vals[f"r:{rkey}"] = (limits.rate_limit, limits.rate_per_ms)
            most, per = enforced(named.get(rkey), "r", limits.rate_limit, limits.rate_per_ms)
            if most is not None and per is not None and self._started(rkey, now, per) >= most:
                return Verdict(f"r:{rkey}", self._next_room(rkey, now, per))
        return Verdict()

    def count(self, eid: UUID, now: int, named: Mapping[str, NamedLimit]) -> None:
        """The entry leased: it holds a slot and its start counts."""
        limits = self.entries.get(eid)
        if limits is None:
            return
        if limits.concurrency_key is not None:
            self.running.setdefault(limits.concurrency_key, set()).add(eid)
        rkey = limits.rate_key
        if rkey is not None:
            _, per = enforced(named.get(rkey), "r", limits.rate_limit, limits.rate_per_ms)
            if per is not None:
                bisect.insort(self.starts.setdefault(rkey, []), now)

    def set_aside(self, eid: UUID, member: str, slot: _Waiting, wake_at: int | None) -> bool:
        """Move a due entry, taken off its ready list, to the wait list of ``member``
        (``slot``: its waiting score); True the first time the entry waits."""
        self.aside[eid] = (member, slot)
        bisect.insort(self.waiting.setdefault(member, []), slot)
        if wake_at is not None:
            self.wake[member] = min(self.wake.get(member, wake_at), wake_at)
        first = eid not in self.noted
        self.noted.add(eid)
        return first

    def woken(self, now: int, named: Mapping[str, NamedLimit]) -> list[_Waiting]:
        """The waiting entries that go back to their ready lists now (as waiting slots:
        the caller splits band and score)."""
        back: list[_Waiting] = []
        for member in [m for m, at in self.wake.items() if at <= now]:
            del self.wake[member]
            back += self._wake(member, now, named)
        return back

    def _wake(self, member: str, now: int, named: Mapping[str, NamedLimit]) -> list[_Waiting]:
        kind, key = member[0], member[2:]
        own, own_per = self.vals.get(member, (None, None))
        most, per = enforced(named.get(key), kind, own, own_per)
        room = MAX_SET_ASIDE
        if most is not None:
            in_use = self._held(key, now) if kind == "c" else self._started(key, now, per or 0)
            room = max(min(room, most - in_use), 0)
        waiting = self.waiting.get(member, [])
        back, waiting[:room] = waiting[:room], []
        for _, _, eid in back:
            del self.aside[eid]
        if waiting:
            self._wake_later(member, now, most, per)
        return back

    def _wake_later(self, member: str, now: int, most: int | None, per: int | None) -> None:
        """When the entries left waiting for ``member`` get their next look, as lease.lua
        sets it: at once without a value, when a rebuild's hold ends, when a rate window
        has room; a concurrency key waits for a freed slot."""
        closed = self._closed_until(member, now)
        if most is None:
            self.wake[member] = 0
        elif closed is not None:
            self.wake[member] = closed
        elif member[0] == "r" and per is not None:
            self.wake[member] = self._next_room(member[2:], now, per)

    def _closed_until(self, member: str, now: int) -> int | None:
        """When a limit a rebuild closed has room by itself (as lease.lua's next_room)."""
        closed = self.closed.get(member, -1)
        return closed + 1 if closed >= now else None

    def _held(self, key: str, now: int) -> int:
        if self._closed_until(f"c:{key}", now) is not None:
            return FULL
        return len(self.running.get(key, ()))

    def _started(self, key: str, now: int, per: int) -> int:
        if self._closed_until(f"r:{key}", now) is not None:
            return FULL
        # As lease.lua: starts after ``now`` count, and SKEW more history is kept.
        starts = self.starts.get(key, [])
        del starts[: bisect.bisect_left(starts, now - per - SKEW)]
        return bisect.bisect_right(starts, now + per) - bisect.bisect_left(starts, now - per)

    def _next_room(self, key: str, now: int, per: int) -> int:
        closed = self._closed_until(f"r:{key}", now)
        if closed is not None:
            return closed
        starts = self.starts.get(key, [])
        first = bisect.bisect_left(starts, now - per)
        return (starts[first] if first < len(starts) else now) + per + 1

    def usage(self, queue: str, now: int, named: Mapping[str, NamedLimit]) -> list[LimitUsage]:
        found = []
        for member in sorted(self.vals):
            kind, key = member[0], member[2:]
            most, per = enforced(named.get(key), kind, *self.vals[member])
            if kind == "c":
                in_use = len(self.running.get(key, ()))
            else:
                starts = self.starts.get(key, [])
                in_use = len(starts) - bisect.bisect_left(starts, now - (per or 0))
            found.append(
                LimitUsage(
                    queue=queue,
                    kind=LIMIT_KINDS[kind],
                    key=key,
                    in_use=in_use,
                    waiting=len(self.waiting.get(member, ())),
                    allowed=most,
                )
            )
        return found
