"""What the benchmark scripts share: services, progress lines, tables and JSON results.

The scripts load this file by its path, after removing their folder from ``sys.path``
(``bench/queue.py`` would shadow the standard library's ``queue``), so every import
here is an ordinary one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import redis
from psycopg import sql

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from _typeshed import DataclassInstance
    from psycopg.rows import TupleRow

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REDIS_START_TIMEOUT = 10.0

# (column name, format of its cells) for format_table
Columns = tuple[tuple[str, str], ...]


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {timeout:g}s")
        time.sleep(poll)


class Progress:
    """A ``(done, total)`` callback that logs at most once a second, and at the end."""

    def __init__(self, label: str, total: int, every: float = 1.0) -> None:
        self.label = label
        self.total = total
        self.every = every
        self.begun = time.perf_counter()
        self.last = self.begun
        self.shown = -1

    def __call__(self, done: int, total: int = 0) -> None:
        total = max(total, self.total)
        now = time.perf_counter()
        if done == self.shown or (now - self.last < self.every and done < total):
            return
        self.last, self.shown = now, done
        share = f" ({100 * done / total:.0f}%)" if total else ""
        log(f"{self.label}: {done:,}/{total:,}{share}, {now - self.begun:.1f}s")


def rate(count: int, seconds: float) -> float:
    """``count`` per second, one decimal (0.0 for no time)."""
    return round(count / seconds, 1) if seconds > 0 else 0.0


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0.0 when empty)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc``, with ``--admin-url``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument(
        "--admin-url",
        default=DEFAULT_ADMIN_URL,
        help=f"PostgreSQL URL allowed to create and drop databases (default {DEFAULT_ADMIN_URL})",
    )
    return parser


# ---- PostgreSQL -------------------------------------------------------------------------


@contextlib.contextmanager
def throwaway_postgres(admin_url: str) -> Iterator[str]:
    """A new database, created and dropped through ``admin_url``; yields its URL."""
    name = f"jobledger_bench_{uuid.uuid4().hex[:10]}"
    base, _, _ = admin_url.rpartition("/")
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        log(f"created database {name}")
        try:
            yield f"{base}/{name}"
        finally:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))
            log(f"dropped database {name}")


def analyze(conn: psycopg.Connection[TupleRow], label: str) -> None:
    """ANALYZE the whole database. Autovacuum may be off (it is on the machine the
    figures in bench/README.md come from): without it, tables filled since the last
    ANALYZE keep the statistics of empty tables, and the planner plans for those."""
    begun = time.perf_counter()
    conn.execute("ANALYZE")
    log(f"{label}: ANALYZE took {time.perf_counter() - begun:.2f}s")


def autovacuum(url: str) -> str:
    """The server's ``autovacuum`` setting: on or off."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    return str(row[0]) if row else "?"


def postgres_version(url: str) -> str:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


def versions(url: str, redis_url: str) -> str:
    """The PostgreSQL and Redis server versions, for the log and the JSON."""
    client = redis.Redis.from_url(redis_url)
    try:
        info = client.info("server")
    finally:
        client.close()
    return f"{postgres_version(url)}, Redis {info.get('redis_version', '?')}"


def redis_server_pid(redis_url: str) -> int:
    """The process id of the redis-server at ``redis_url``, for its CPU time."""
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


# ---- a private redis-server -------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_ping(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + REDIS_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with {process.returncode}")
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            time.sleep(0.05)
        finally:
            client.close()
    raise RuntimeError(f"redis-server did not answer PING within {REDIS_START_TIMEOUT:g}s")


def start_redis(binary: str, folder: str, port: int) -> subprocess.Popen[bytes]:
    args = [binary, "--save", "", "--appendonly", "no", "--port", str(port)]
    args += ["--bind", "127.0.0.1", "--dir", folder, "--logfile", f"{folder}/redis.log"]
    # Its own session: Ctrl-C reaches the script, which then stops the server.
    return subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
        args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free loopback port, persistence off; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (it must be on PATH)")
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-redis-") as folder:
        port = free_port()
        process = start_redis(binary, folder, port)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            wait_for_ping(url, process)
            log(f"started redis-server on port {port} (pid {process.pid})")
            yield url
        finally:
            stop(process)
            log("stopped redis-server")


# ---- output -----------------------------------------------------------------------------


def show(value: object) -> str:
    """A cell: ``-`` for None, yes/no, floats with two decimals."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def format_table(
    rows: Sequence[DataclassInstance],
    columns: Columns,
    show: Callable[[object], str] = show,
) -> str:
    """A header, a rule, and one line per dataclass row; trailing blanks removed."""
    header = " ".join(fmt.format(name) for name, fmt in columns).rstrip()
    lines = [header, "-" * len(header)]
    for row in rows:
        values = asdict(row)
        cells = [fmt.format(show(values[name])) for name, fmt in columns]
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)


def recorded_at() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def machine() -> dict[str, object]:
    """The ``cpus`` and ``python`` keys of a result."""
    return {"cpus": os.cpu_count(), "python": platform.python_version()}


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def write_json(stem: str, document: Mapping[str, object]) -> Path:
    """Write ``results/<stem>.json``; returns its path."""
    path = RESULTS_DIR / f"{stem}.json"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def write_rows(
    benchmark: str,
    *,
    quick: bool,
    store: str,
    sizes: DataclassInstance,
    rows: Sequence[DataclassInstance],
) -> Path:
    """Write ``results/<benchmark>.json`` (``<benchmark>-quick.json`` for a quick run):
    the rows, with when, on what stores and machine, and at what sizes they ran."""
    document = {
        "benchmark": benchmark,
        "recorded_at": recorded_at(),
        "store": store,
        **machine(),
        "load_average": load_average(),
        "sizes": asdict(sizes),
        "rows": [asdict(row) for row in rows],
    }
    path = write_json(f"{benchmark}-quick" if quick else benchmark, document)
    log(f"wrote {path}")
    return path


# ---- subprocesses and their CPU time ----------------------------------------------------


def role_environment(
    database_url: str, redis_url: str, prefix: str, **settings: str
) -> dict[str, str]:
    """This process's environment without jobledger settings, for a ``jobledger`` child
    on these stores; ``settings`` become ``JOBLEDGER_<NAME>`` variables."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    environ |= {
        "JOBLEDGER_DATABASE_URL": database_url,
        "JOBLEDGER_REDIS_URL": redis_url,
        "JOBLEDGER_REDIS_PREFIX": prefix,
    }
    return environ | {f"JOBLEDGER_{name.upper()}": value for name, value in settings.items()}


def stop_group(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM to a process started with ``start_new_session``; after ``timeout``, SIGKILL
    to its whole group, so that no forked child outlives it."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return text.rpartition(")")[2].split()


def cpu_seconds(pids: Iterable[int]) -> float:
    """User plus system CPU time of the processes so far (Linux ``/proc``; gone ones add 0)."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _CLOCK_TICKS


def _all_pids() -> list[int]:
    if not _PROC.is_dir():
        return []
    return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (forked workers, pool children)."""
    children: dict[int, list[int]] = {}
    for other in _all_pids():
        fields = _stat_fields(other)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(other)  # ppid
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def pids_named(name: str, *, title: Callable[[str], bool] | None = None) -> list[int]:
    """Processes whose command name (``/proc/<pid>/comm``) is ``name``, e.g. postgres;
    with ``title``, only those whose command line passes it (PostgreSQL shows the
    database and the client of a backend there)."""
    found = []
    for pid in _all_pids():
        folder = _PROC / str(pid)
        try:
            if (folder / "comm").read_text(encoding="utf-8").strip() != name:
                continue
            line = (folder / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if title is None or title(line):
            found.append(pid)
    return found


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine so far, all cores added (``/proc/stat``)."""
    try:
        line = (_PROC / "stat").read_text(encoding="ascii").splitlines()[0]
    except (FileNotFoundError, IndexError):
        return 0.0
    # user nice system idle iowait irq softirq steal: all but idle and iowait are busy
    values = [int(value) for value in line.split()[1:9]]
    return (sum(values) - values[3] - values[4]) / _CLOCK_TICKS


def fingerprint(url: str) -> dict[str, str]:
    """Per read-model table: its row count and a hash of all its rows, in any order."""
    from jobledger.projections.read_models.tables import TABLES  # noqa: PLC0415 (the scripts that hash tables only)

    found = {}
    with psycopg.connect(url) as conn:
        for table in TABLES:
            query = sql.SQL(
                "SELECT count(*), coalesce(md5(string_agg(md5(t::text), '' "
                "ORDER BY md5(t::text))), '') FROM {} t"
            ).format(sql.Identifier(table))
            row = conn.execute(query).fetchone()
            found[table] = "-" if row is None else f"{row[0]}:{row[1]}"
    return found
