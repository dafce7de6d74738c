"""What the API's routes share: the container's services, the clock, background tasks."""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobledger.projections.database import Database
from jobledger.runtime.accounts import Accounts
from jobledger.runtime.bootstrap import Container
from jobledger.runtime.breakers import Breakers
from jobledger.runtime.settings import IPNetwork


def utc_now() -> datetime:
    return datetime.now(tz=UTC)


@dataclass
class TaskStatus:
    """A long admin operation (a queue rebuild) that the dashboard polls."""

    name: str
    state: str = "idle"  # idle | running | done | failed
    done: int = 0
    total: int = 0
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass
class ApiState:
    container: Container
    accounts: Accounts
    handler_names: frozenset[str]
    now: Callable[[], datetime] = utc_now
    rebuild: TaskStatus = field(default_factory=lambda: TaskStatus("queue-rebuild"))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _breakers: Breakers | None = None
    trusted_proxies: tuple[IPNetwork, ...] = field(init=False)

    @property
    def database(self) -> Database:
        return self.container.database

    def __post_init__(self) -> None:
        # Parsed once: every sign-in reads them.
        self.trusted_proxies = self.container.settings.proxy_networks

    def breaker_states(self) -> dict[str, str]:
        """Every handler's breaker as the workers share it. Breakers are made on first
        use, so ask about each handler once; the instances then stay."""
        with self._lock:
            if self._breakers is None:
                self._breakers = self.container.breakers()
                for name in self.handler_names:
                    self._breakers.get(name)
            breakers = self._breakers
        return dict(sorted(breakers.states().items()))

    def start_task(self, status: TaskStatus, now: datetime) -> bool:
        """Mark ``status`` running unless it already runs; False if it did."""
        with self._lock:
            if status.state == "running":
                return False
            status.state, status.done, status.total, status.message = "running", 0, 0, ""
            status.started_at, status.finished_at = now, None
            return True
