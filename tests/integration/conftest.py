"""Redis fixtures: a private, throwaway redis-server per test session.

The server listens on a free loopback port with persistence off, so the tests never
touch a Redis the machine runs for itself.
"""

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

_START_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else "(no log)"


def _wait_for_ping(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"redis-server exited with {process.returncode}: {_tail(log)}")
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            time.sleep(0.05)
        finally:
            client.close()
    pytest.fail(f"redis-server did not answer PING within {_START_TIMEOUT} s: {_tail(log)}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a private redis-server, started for this session and stopped after."""
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed"
        if os.environ.get("JOBLEDGER_REQUIRE_SERVICES"):
            pytest.fail(f"{message} (JOBLEDGER_REQUIRE_SERVICES is set)")
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp("redis")
    log = workdir / "redis.log"
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    args = [binary, "--save", "", "--appendonly", "no", "--port", str(port)]
    args += ["--bind", "127.0.0.1", "--dir", str(workdir), "--logfile", str(log)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # noqa: S603 (a fixed argument list, no shell)
    try:
        _wait_for_ping(url, process, log)
        yield url
    finally:
        _stop(process)


@pytest.fixture
def redis_client(redis_server: str) -> Iterator[redis.Redis]:
    """A client on the private server, which is emptied before each test."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    try:
        yield client
    finally:
        client.close()
