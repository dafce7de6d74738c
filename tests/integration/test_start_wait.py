"""A role started before its stores: `jobledger worker` as a process, with PostgreSQL
behind a port that opens late and a Redis that starts late; and the mistakes that stop
it at once."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from tests.conftest import missing_service
from tests.integration.conftest import Harness
from tests.ports import free_port


def _environ(**settings: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    environ["JOBLEDGER_LOG_FORMAT"] = "json"
    environ |= {f"JOBLEDGER_{k.upper()}": v for k, v in settings.items()}
    return environ


def _worker(log: Path, **settings: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as stderr:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", "worker"],
            env=_environ(**settings),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _events(log: Path) -> list[str]:
    lines = log.read_text(errors="replace").splitlines()
    return [str(json.loads(line).get("event", "")) for line in lines if line.startswith("{")]


@contextmanager
def _forwarder(port: int, target: tuple[str, int]) -> Iterator[None]:
    """Opens ``port`` on loopback and pipes each connection to ``target``: a
    PostgreSQL that starts listening now."""
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.1)
    stop = threading.Event()

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.timeout(120)
def test_a_worker_started_before_its_stores_waits_for_them_then_runs(
    postgres_url: str, tmp_path: Path
) -> None:
    """If a worker starts while nothing listens at its PostgreSQL or Redis address, then
    it waits, saying so once per store, and runs once both come up; it exits 0 when
    stopped."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_service("redis-server is not installed")
    parts = urlsplit(postgres_url)
    late_pg = free_port()
    late_url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{late_pg}"))
    redis_port = free_port()
    log = tmp_path / "worker.log"
    worker = _worker(
        log,
        database_url=late_url,
        redis_url=f"redis://127.0.0.1:{redis_port}/0",
        start_timeout="60",
        metrics_port="0",
    )
    redis_server = None
    try:
        Harness.wait_for(lambda: "start.waiting" in _events(log), timeout=30)
        time.sleep(1)  # it keeps waiting, quietly
        assert worker.poll() is None
        with _forwarder(late_pg, (parts.hostname or "127.0.0.1", parts.port or 5432)):
            Harness.wait_for(lambda: _events(log).count("start.waiting") == 2, timeout=30)  # Redis
            redis_server = subprocess.Popen(  # noqa: S603 (a fixed argument list)
                [binary, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""],
                stdout=subprocess.DEVNULL,
                cwd=tmp_path,
            )
            Harness.wait_for(lambda: "worker.started" in _events(log), timeout=30)
            worker.terminate()
            assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        if redis_server is not None:
            redis_server.terminate()
            redis_server.wait(10)
    events = _events(log)
    assert events.count("start.waiting") == 2
    assert events.count("start.reachable") == 2


@pytest.mark.parametrize(
    ("database", "waits"), [("nosuchdb", False), (None, True)], ids=["a wrong name", "no server"]
)
def test_a_mistake_stops_at_once_and_a_missing_server_at_the_timeout(
    postgres_url: str, tmp_path: Path, database: str | None, waits: bool
) -> None:
    """If the database does not exist, then the worker exits 2 at once with one line
    that says so; if nothing listens, then it exits 2 once the start timeout passed,
    having said it waited."""
    parts = urlsplit(postgres_url)
    if database is not None:
        url = urlunsplit(parts._replace(path=f"/{database}"))
    else:
        url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{free_port()}"))
    log = tmp_path / "worker.log"
    began = time.monotonic()
    worker = _worker(log, database_url=url, start_timeout="2", redis_url="")
    assert worker.wait(30) == 2
    took = time.monotonic() - began
    text = log.read_text()
    assert "cannot reach the event store" in text
    if waits:
        assert took >= 2
        assert [e for e in _events(log) if e.startswith("start.")] == [
            "start.waiting",
            "start.gave_up",
        ]
    else:
        assert 'database "nosuchdb" does not exist' in text
        assert not any(e.startswith("start.") for e in _events(log))
