"""The API tokens a process resolved lately, so that a client sending many requests
with one token is answered without a read of the accounts table each time (ADR 103).

An entry is what the table said of a token and its user, and when it said it; it
answers for ``KEPT_FOR`` after that read. A change this process makes to users or
tokens forgets every entry at once (``forget``), and a read that began before such a
change is not kept (the generation it began in has passed). A change another process
makes (the CLI, another API process) is seen at the latest ``KEPT_FOR`` later. Only
tokens the table knows are kept: an unknown secret is looked up every time, as before,
and the per-address request budget bounds how often.
"""

import threading
from datetime import timedelta

from jobledger.infra.accounts import StoredKey

KEPT_FOR = timedelta(seconds=1)
# A bound on what one process holds; past it, the entries start again from none.
MOST_KEPT = 10_000
_MS = timedelta(milliseconds=1)


class RecentKeys:
    """Stored tokens by digest, each with the time (ms) it was read; see the module doc.
    Reads take no lock (one dictionary lookup); a write and ``forget`` take turns, so
    that a read older than a change is never kept."""

    def __init__(self, kept_for: timedelta = KEPT_FOR, most: int = MOST_KEPT) -> None:
        self._kept_ms = kept_for // _MS
        self._most = most
        self._found: dict[str, tuple[StoredKey, int]] = {}
        self._lock = threading.Lock()
        self.generation = 0

    def get(self, digest: str, *, at_ms: int) -> StoredKey | None:
        """The token as read at most ``KEPT_FOR`` before ``at_ms``; None otherwise."""
        entry = self._found.get(digest)
        if entry is None:
            return None
        key, read_ms = entry
        if not 0 <= at_ms - read_ms < self._kept_ms:
            self._found.pop(digest, None)
            return None
        return key

    def put(self, digest: str, key: StoredKey, *, read_ms: int, generation: int) -> None:
        """Keep ``key`` as read at ``read_ms`` by a read that began in ``generation``."""
        with self._lock:
            if generation != self.generation:
                return  # a change was made during the read: the next request reads again
            if len(self._found) >= self._most:
                self._found.clear()
            self._found[digest] = (key, read_ms)

    def replace(self, digest: str, key: StoredKey) -> None:
        """``key`` in place of a kept entry, with its read time (a touch of last use)."""
        with self._lock:
            entry = self._found.get(digest)
            if entry is not None:
                self._found[digest] = (key, entry[1])

    def forget(self) -> None:
        """Every entry, after a change to users or tokens."""
        with self._lock:
            self.generation += 1
            self._found.clear()
