"""Servers a fault test owns and may break: a redis-server it kills and starts again
empty, and a PostgreSQL cluster it stops, crashes (kill -9) and starts again. Neither
touches the servers the machine runs for itself."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import psycopg
from tests.conftest import missing_service
from tests.ports import free_port
from tests.roles import wait_for

PG_BIN = Path("/usr/lib/postgresql/15/bin")
_PROC = Path("/proc")


# ---- a redis-server this test may kill ---------------------------------------------


class PrivateRedis:
    """A redis-server without persistence on a fixed port: killed, it comes back empty."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing_service("redis-server is not installed")
        self._binary = binary or ""
        self._workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [self._binary, "--save", "", "--appendonly", "no", "--port", str(self.port)]
        args += ["--bind", "127.0.0.1", "--dir", str(self._workdir)]
        self.process = subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self._answers, "the private redis-server answers PING", timeout=10)

    def _answers(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), 1) as sock,
        ):
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        return False

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def freeze(self) -> None:
        """SIGSTOP: the server keeps its connections and answers nothing until ``thaw``."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


# ---- a PostgreSQL cluster this test may stop ---------------------------------------


class PrivateCluster:
    """initdb into a temporary folder and pg_ctl on a free port, as the postgres user
    when this runs as root (PostgreSQL refuses to run as root). ``server`` adds
    settings of the server (``-c name=value``)."""

    def __init__(self, server: Mapping[str, str] | None = None) -> None:
        if not (PG_BIN / "initdb").exists():
            missing_service(f"PostgreSQL's server programs are not in {PG_BIN}")
        self.folder = Path(tempfile.mkdtemp(prefix="jobledger-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/jobledger"
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._server = dict(server or {})
        self._as_owner: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
            self._as_owner = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        command = [*self._as_owner, *args]
        result = subprocess.run(  # noqa: S603 (a fixed argument list)
            command, capture_output=True, text=True, check=False, timeout=60
        )
        assert result.returncode == 0, f"{args[0]}: {result.stdout}{result.stderr}"

    def create(self) -> None:
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        self.start()
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE jobledger")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off"
        options += "".join(f" -c {name}={value}" for name, value in self._server.items())
        log = str(self.folder / "server.log")
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start"
        )

    def stop(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """kill -9 of the server and every process of it, as a crash leaves them: the
        next ``start`` recovers from the write-ahead log. The postmaster is stopped
        first, so that it forks no backend while its children are counted."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)
        doomed = [postmaster, *_children(postmaster)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Until whatever adopted them reaps them, the dead postmaster's lock files still
        # look held to the next start.
        wait_for(lambda: not any(_stat(pid) for pid in doomed), "the killed server is gone")

    def freeze(self) -> list[int]:
        """SIGSTOP of the server and every process of it (the postmaster first, so that
        it forks no backend meanwhile): its connections stay open and nothing answers.
        Returns the processes to give to ``thaw``."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)
        frozen = [postmaster, *_children(postmaster)]
        for pid in frozen[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return frozen

    def thaw(self, frozen: list[int]) -> None:
        for pid in reversed(frozen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def remove(self) -> None:
        with contextlib.suppress(AssertionError):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def _children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (Linux ``/proc``)."""
    pids = (int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit())
    return [pid for pid in pids if _stat(pid)[1:2] == [str(parent)]]


def _stat(pid: int) -> list[str]:
    """State and parent of ``pid`` (the fields of ``/proc/<pid>/stat`` after the name)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return []
    return text.rpartition(")")[2].split()
