"""The production roles as processes, for the tests that run a deployment: each
`jobledger <role>` a child process with its output in a file, an admin client of the
API they serve, and the waits and metric scrapes those tests share."""

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.ports import free_port

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

ADMIN_PASSWORD = "staple-battery-horse-42"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def wait_for(
    condition: Callable[[], bool],
    what: str,
    timeout: float = 30,
    detail: Callable[[], str] = str,
) -> None:
    """Poll ``condition`` until it holds; past ``timeout`` fail, naming ``what`` and
    whatever ``detail`` tells about the state it was in (a log, the parts missing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}\n{detail()}")
        time.sleep(0.1)


class Role:
    """One `jobledger <role>` process, its output in a file (a pipe could fill up)."""

    def __init__(
        self,
        name: str,
        args: list[str],
        environ: dict[str, str],
        logs: Path,
        *,
        module: str = "jobledger.cli",
    ) -> None:
        """``module`` runs with ``args``: the command, or a test's own launcher."""
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.process = subprocess.Popen(  # noqa: S603 (our own entry point)
            [sys.executable, "-m", module, *args],
            env=environ,
            cwd=logs,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        port = environ.get("JOBLEDGER_METRICS_PORT") or environ.get("JOBLEDGER_API_PORT")
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"

    def scrape(self) -> Samples:
        try:
            return parse(httpx.get(self.metrics_url, timeout=5).text)
        except httpx.TransportError:
            return {}

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return -signal.SIGKILL
        finally:
            self._log.close()

    def output(self) -> str:
        return self.log_path.read_text()


class Deployment:
    def __init__(self) -> None:
        self.roles: dict[str, Role] = {}
        self.api_url = ""

    def of(self, kind: str) -> list[Role]:
        return [r for n, r in self.roles.items() if n.rstrip("0123456789") == kind]

    def check_alive(self) -> None:
        for role in self.roles.values():
            if not role.alive():
                pytest.fail(f"{role.name} exited with {role.process.returncode}: {role.output()}")


def launch(
    deployment: Deployment,
    shared: dict[str, str],
    logs: Path,
    jobledger_cli: "JobledgerCli",
    *schedulers: str,
) -> None:
    """Start the api, the named schedulers, two workers and a projector into
    ``deployment``, each with ``shared`` settings and a port of its own.

    Each role keeps a pool of two connections unless ``shared`` says otherwise: two
    deployments run at once under the parallel test run, and with the default pool
    they can reach the server's ``max_connections`` together."""
    shared = {"database_pool_size": "2"} | shared
    api_port = free_port()
    deployment.api_url = f"http://127.0.0.1:{api_port}"
    plan = {"api": {"api_port": str(api_port), "admin_password": ADMIN_PASSWORD}}
    for name in (*schedulers, "worker1", "worker2", "projector"):
        plan[name] = {"metrics_port": str(free_port())}
    for name, own in plan.items():
        environ = jobledger_cli.environment(**shared, **own)
        deployment.roles[name] = Role(name, [name.rstrip("12")], environ, logs)


@contextlib.contextmanager
def admin_client(url: str) -> Iterator[httpx.Client]:
    """A client signed in as the admin the API created from JOBLEDGER_ADMIN_PASSWORD."""
    with httpx.Client(base_url=url, timeout=10) as client:
        response = client.post(
            "/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        )
        assert response.status_code == 200, response.text
        client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
        yield client


def wait_until_serving(deployment: Deployment) -> None:
    def up() -> bool:
        deployment.check_alive()
        try:
            return httpx.get(f"{deployment.api_url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, "the API answers /health", timeout=40)
    wait_for(lambda: all(r.scrape() for r in deployment.roles.values()), "every /metrics")
    schedulers = deployment.of("scheduler")
    wait_for(
        lambda: sum(total(s.scrape(), "jobledger_leader") for s in schedulers) == 1,
        "one scheduler leads",
    )
