"""The production roles of a fault run, on stores of its own.

An api, a projector, two schedulers and three workers, each a process started as the
Procfile starts it, on a private redis-server and a private PostgreSQL cluster, with a
short lease ttl and the chaos handlers registered. Each role has a ``Slot``: the
process in it can be killed, stopped, or swapped for a worker whose clock is off, and
started again; every start of it logs to a file of its own.
"""

import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import redis
from tests.chaos.handlers import EFFECTS_DIR, SETTING
from tests.chaos.skewed_worker import OFFSET
from tests.conftest import JobledgerCli
from tests.ports import free_port
from tests.private_stores import PrivateCluster, PrivateRedis
from tests.roles import ADMIN_PASSWORD, Role, total, wait_for

from jobledger.adapters.redis.keys import Keys
from jobledger.bootstrap import Container, bootstrap
from jobledger.infra.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ("worker1", "worker2", "worker3")
ROLES = ("api", "projector", "scheduler1", "scheduler2", *WORKERS)
PREFIX = "chaos"
LEASE_TTL = 3.0  # seconds: short, so that lost leases are found within a fault
LEADER_TTL = 1.5
MISFIRE_GRACE = 5.0
# Every role, as run here; the rest is the shipped default.
SETTINGS = {
    "redis_prefix": PREFIX,
    "projection_poll_ms": "100",
    "leader_ttl_ms": str(int(LEADER_TTL * 1000)),
    "leader_renew_ms": "500",
    "leader_poll_ms": "200",
    "worker_lease_ttl_seconds": str(LEASE_TTL),
    "worker_grace_seconds": "2",
    "misfire_grace_seconds": str(MISFIRE_GRACE),
    "breaker_fail_max": "5",
    "breaker_reset_seconds": "1",
    "database_pool_size": "3",
    "handlers": SETTING,
    "test_handlers": "true",
    "log_format": "json",
}
CRASH_EXIT = 70  # test.crash's exit status: a poison job ended the worker


class Slot:
    """One role's place: its settings, and the process that holds it now. A fault
    holds ``lock`` while the process is down or stopped on purpose."""

    def __init__(self, name: str, environ: dict[str, str], logs: Path) -> None:
        self.name = name
        self.command = name.rstrip("0123456789")
        self.environ = environ
        self.logs = logs
        self.lock = threading.RLock()
        self.role: Role | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.role.process.pid if self.role is not None else None

    def start(self, clock_offset: float | None = None) -> None:
        """A new process; with ``clock_offset``, a worker whose clock is that far off."""
        self.starts += 1
        name = f"{self.name}.{self.starts}"
        if clock_offset is None:
            self.role = Role(name, [self.command], self.environ, self.logs)
            return
        environ = self.environ | {OFFSET: str(clock_offset)}
        self.role = Role(name, [], environ, self.logs, module="tests.chaos.skewed_worker")

    def alive(self) -> bool:
        return self.role is not None and self.role.alive()

    def kill(self) -> None:
        if self.role is not None:
            self.role.process.kill()
            self.role.stop(timeout=10)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM (SIGCONT first: a stopped process cannot act on it), then wait."""
        if self.role is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            self.role.process.send_signal(signal.SIGCONT)
        return self.role.stop(timeout=timeout)

    def signal(self, signum: int) -> None:
        if self.role is not None:
            with contextlib.suppress(ProcessLookupError):
                self.role.process.send_signal(signum)

    def exit_code(self) -> int | None:
        return self.role.process.poll() if self.role is not None else None

    def refused_at_start(self) -> bool:
        """Whether it exited at its start check, a store being unreachable (status 2
        and the one line that says so)."""
        return self.exit_code() == 2 and "jobledger: cannot reach" in self.tail(5)

    def tail(self, lines: int = 15) -> str:
        if self.role is None or not self.role.log_path.exists():
            return ""
        text = self.role.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


class ChaosDeployment:
    """The stores and the roles of one fault run, in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.effects = workdir / "effects"
        for folder in (self.logs, self.effects, workdir / "redis", workdir / "data"):
            folder.mkdir(parents=True, exist_ok=True)
        self.redis = PrivateRedis(workdir / "redis")
        self.postgres = PrivateCluster({"max_connections": "300"})
        self.api_url = ""
        self.slots: dict[str, Slot] = {}
        self.shared = SETTINGS | {
            "database_url": self.postgres.url,
            "redis_url": self.redis.url,
            "data_dir": str(workdir / "data"),
        }

    # ---- up and down ------------------------------------------------------------------

    def start(self) -> None:
        self.redis.start()
        self.postgres.create()
        migrated = self.cli("migrate")
        assert migrated.returncode == 0, migrated.stderr
        api_port = free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        for name in ROLES:
            own = {"api_port": str(api_port), "admin_password": ADMIN_PASSWORD}
            if name != "api":
                own = {"metrics_port": str(free_port())}
            self.slots[name] = Slot(name, self.environment(**own), self.logs)
        for slot in self.slots.values():
            slot.start()
        self.wait_until_serving()

    def stop(self) -> dict[str, int | None]:
        """Every role stopped (their exit statuses), then the stores."""
        try:
            return {name: slot.stop() for name, slot in self.slots.items()}
        finally:
            self.redis.stop()
            self.postgres.remove()

    def environment(self, **own: str) -> dict[str, str]:
        environ = JobledgerCli.environment(**self.shared, **own)
        return environ | {"PYTHONPATH": str(ROOT), EFFECTS_DIR: str(self.effects)}

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A `jobledger` command on this deployment's stores."""
        return subprocess.run(  # noqa: S603 (our own entry point, fixed arguments)
            [sys.executable, "-m", "jobledger.cli", *args],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def settings(self) -> Settings:
        return load_settings({}, **self.shared)

    @contextlib.contextmanager
    def container(self) -> Iterator[Container]:
        """The wired objects of a jobledger process on these stores, for reading them."""
        with bootstrap(self.settings()) as built:
            yield built

    # ---- health ---------------------------------------------------------------------

    def serving(self) -> bool:
        """The API answers /ready, every role's metrics answer and one scheduler leads."""
        try:
            if httpx.get(f"{self.api_url}/ready", timeout=3).status_code != 200:
                return False
        except httpx.TransportError:
            return False
        roles = [slot.role for slot in self.slots.values() if slot.role is not None]
        samples = [role.scrape() for role in roles]
        leaders = sum(total(s, "jobledger_leader") for s in samples)
        return all(samples) and leaders == 1

    def wait_until_serving(self, timeout: float = 60) -> None:
        wait_for(self.serving, "every role serves and one scheduler leads", timeout=timeout)

    def leader(self) -> Slot | None:
        """The scheduler that holds the leader lock now (its pid is in the token)."""
        client = redis.Redis.from_url(self.redis.url, socket_timeout=2)
        try:
            token = client.get(Keys(PREFIX).leader)
        except redis.RedisError:
            return None
        finally:
            client.close()
        if not isinstance(token, bytes):
            return None
        host = socket.gethostname()
        pid_text = token.decode().removeprefix(f"{host}-").split("-")[0]
        return next((s for s in self.slots.values() if str(s.pid) == pid_text), None)
