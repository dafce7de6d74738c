"""The API callers' budgets held by one process (``jobledger dev``, embedded, a single API)."""

import threading
import uuid
from collections.abc import Sequence

from jobledger.infra.budgets import Ask, Verdict, spend, tightest

# A memory budget map larger than this forgets the budgets that are full again.
_PRUNE_ABOVE = 10_000


class MemoryBudgets:
    """The budgets of one process (``jobledger dev``, embedded, a single API)."""

    blocking = False

    def __init__(self) -> None:
        self._tats: dict[str, int] = {}
        self._holds: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def take(self, asks: Sequence[Ask], cost: int, *, now_us: int) -> Verdict:
        with self._lock:
            results = [spend(self._tats.get(a.name, 0), now_us, cost, a.allowance) for a in asks]
            verdict = tightest([v for _, v in results])
            if verdict.allowed:
                for ask, (tat, _) in zip(asks, results, strict=True):
                    self._tats[ask.name] = tat or 0
            if len(self._tats) > _PRUNE_ABOVE:
                self._tats = {name: tat for name, tat in self._tats.items() if tat > now_us}
        return verdict

    def hold(self, name: str, cap: int, *, until_ms: int, now_ms: int) -> tuple[str | None, int]:
        with self._lock:
            open_ = {t: end for t, end in self._holds.get(name, {}).items() if end > now_ms}
            if len(open_) >= cap:
                self._holds[name] = open_
                return None, max(1, min(open_.values()) - now_ms)
            ticket = uuid.uuid4().hex
            open_[ticket] = until_ms
            self._holds[name] = open_
        return ticket, 0

    def release(self, name: str, ticket: str) -> None:
        with self._lock:
            open_ = self._holds.get(name, {})
            open_.pop(ticket, None)
            if not open_:
                self._holds.pop(name, None)
