"""The PostgreSQL queues of throughput.py: pgqueuer, Oban for Python and Procrastinate.

Each runs in several configurations (``configs``), each in a throwaway database of its
own with the same two rounds as jobledger: N no-op jobs enqueued by a process of the
library's (its batch call, 1,000 jobs a call), the database analyzed or not (autovacuum
may be off, as it is on the machine these figures come from: without statistics, a
planner that saw empty tables picks plans for empty tables), then drained by 1 and by 2
worker processes; pgqueuer also with several dequeue batch sizes. The benchmark
compares the best configuration. ``PeerRun.probe`` measures pgqueuer's start latency.
The library code runs in processes started through ``_peer_cli.py``, with the
interpreter it needs: Oban for Python needs Python 3.12 or later, so it runs in a
virtual environment of its own, made on first use in a cache folder outside the
repository (``oban_python``).

Completions are counted in each library's own tables, and after each round every job
so far must have completed exactly once (``Peer.audit``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, LiteralString

import psycopg

from bench import _rounds as rounds
from bench import _starts as starts
from bench import _support as support

if TYPE_CHECKING:
    from collections.abc import Sequence

    from psycopg.rows import TupleRow

ENQUEUE_CHUNK = 1_000  # jobs per enqueue call, for every library's batch call
PGQUEUER_BATCH_SIZES = (10, 32, 100)  # pgqueuer's dequeue batch sizes tried
OBAN_REQUIREMENT = "oban==0.7.0"
OBAN_MIN_PYTHON = (3, 12)
OBAN_INSTALL_TIMEOUT = 600.0


@dataclass(frozen=True)
class Audit:
    """Counts over a peer's whole database after a round."""

    completed: int  # completion records
    completed_jobs: int  # distinct jobs among them
    runs: int  # times a job was started (fetched for running)
    left: int  # jobs not completed: still queued, running or failed
    other: int  # records of anything else (retries, failures, cancellations)


@dataclass(frozen=True)
class Peer:
    name: str
    modules: tuple[str, ...]  # what must be importable to run it in this interpreter
    keeps: str  # what it keeps of a job, for the side-by-side table
    settings: str  # how it runs here, for the notes and the JSON
    # A position before a round, then the completions after it, and their first and
    # last time (Unix seconds), all from the library's own tables.
    mark_sql: LiteralString
    done_sql: LiteralString
    span_sql: LiteralString
    audit_sql: LiteralString  # one row: the fields of Audit


PGQUEUER = Peer(
    name="pgqueuer",
    modules=("pgqueuer", "asyncpg"),
    keeps="job row until it ends; 3 log rows per job",
    settings=(
        "asyncpg, one connection per process, uvloop; batch_size"
        f" {'/'.join(map(str, PGQUEUER_BATCH_SIZES))} tried, no cap on tasks at once; pgq autovac"
        " table settings; started through pgqueuer.run (pgq run's call)"
    ),
    mark_sql="SELECT coalesce(max(id), 0) FROM pgqueuer_log",
    done_sql="SELECT count(*) FROM pgqueuer_log WHERE id > %s AND status = 'successful'",
    span_sql=(
        "SELECT extract(epoch FROM min(created)), extract(epoch FROM max(created))"
        " FROM pgqueuer_log WHERE id > %s AND status = 'successful'"
    ),
    audit_sql=(
        "SELECT count(*) FILTER (WHERE status = 'successful'),"
        " count(DISTINCT job_id) FILTER (WHERE status = 'successful'),"
        " count(*) FILTER (WHERE status = 'picked'),"
        " (SELECT count(*) FROM pgqueuer),"
        " count(*) FILTER (WHERE status NOT IN ('queued', 'picked', 'successful'))"
        " FROM pgqueuer_log"
    ),
)
OBAN = Peer(
    name="oban",
    modules=("oban",),
    keeps="one job row per job, kept (pruned after a day)",
    settings=(
        "one queue, limit = slots; pool 1-10 (default); uvloop and"
        " orjson as oban start, without its per-job log line; enqueue_many"
    ),
    mark_sql="SELECT coalesce(max(id), 0) FROM oban_jobs",
    done_sql="SELECT count(*) FROM oban_jobs WHERE id > %s AND state = 'completed'",
    # completed_at is UTC without a time zone.
    span_sql=(
        "SELECT extract(epoch FROM min(completed_at) AT TIME ZONE 'UTC'),"
        " extract(epoch FROM max(completed_at) AT TIME ZONE 'UTC')"
        " FROM oban_jobs WHERE id > %s AND state = 'completed'"
    ),
    audit_sql=(
        "SELECT count(*) FILTER (WHERE state = 'completed'),"
        " count(*) FILTER (WHERE state = 'completed'),"
        " coalesce(sum(attempt), 0),"
        " count(*) FILTER (WHERE state <> 'completed'),"
        " count(*) FILTER (WHERE jsonb_array_length(errors) > 0)"
        " FROM oban_jobs"
    ),
)
PROCRASTINATE = Peer(
    name="procrastinate",
    modules=("procrastinate",),
    keeps="one job row and 3 event rows per job",
    settings=(
        "concurrency = slots async sub-workers, pool of slots + 1 connections;"
        " LISTEN/NOTIFY; batch_defer_async; asyncio"
    ),
    mark_sql="SELECT coalesce(max(id), 0) FROM procrastinate_events",
    done_sql="SELECT count(*) FROM procrastinate_events WHERE id > %s AND type = 'succeeded'",
    span_sql=(
        "SELECT extract(epoch FROM min(at)), extract(epoch FROM max(at))"
        " FROM procrastinate_events WHERE id > %s AND type = 'succeeded'"
    ),
    audit_sql=(
        "SELECT count(*) FILTER (WHERE type = 'succeeded'),"
        " count(DISTINCT job_id) FILTER (WHERE type = 'succeeded'),"
        " count(*) FILTER (WHERE type = 'started'),"
        " (SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'),"
        " count(*) FILTER (WHERE type NOT IN ('deferred', 'started', 'succeeded'))"
        " FROM procrastinate_events"
    ),
)
PEERS = {peer.name: peer for peer in (PGQUEUER, OBAN, PROCRASTINATE)}


# ---- where each one runs ---------------------------------------------------------------


def importable(modules: Sequence[str]) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in modules)


def interpreter(peer: Peer, oban_python: str | None) -> tuple[str | None, str]:
    """The Python to run ``peer`` with, or None and why it cannot run."""
    if peer is OBAN:
        return oban_interpreter(oban_python)
    if importable(peer.modules):
        return sys.executable, ""
    return None, f"not installed (pip install -e '.[bench]' installs {', '.join(peer.modules)})"


def python_version(python: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, or None if it does not run."""
    try:
        result = subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = result.stdout.split()
    if result.returncode != 0 or len(parts) != 2:
        return None
    return int(parts[0]), int(parts[1])


def python_for_oban() -> str | None:
    """The oldest Python 3.12 or later on this machine (the version Oban for Python
    names): this one, one on PATH, or one of pyenv's."""
    if sys.version_info >= OBAN_MIN_PYTHON:
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which(f"python3.{minor}") for minor in range(12, 21)]
    candidates += [str(path) for path in pyenv.glob("versions/3.*/bin/python3")]
    found = []
    for candidate in filter(None, candidates):
        version = python_version(candidate)  # a pyenv shim of another version fails here
        if version is not None and version >= OBAN_MIN_PYTHON:
            found.append((version, candidate))
    return min(found)[1] if found else None


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jobledger-bench"


def oban_interpreter(requested: str | None) -> tuple[str | None, str]:
    """This Python if Oban is importable here; else a virtual environment with Oban for
    Python, made (once) from ``requested`` or a Python 3.12 found on the machine."""
    if requested is None and importable(OBAN.modules):
        return sys.executable, ""
    base = requested or python_for_oban()
    if base is None:
        return None, "needs Python 3.12 or later: none found (name one with --oban-python)"
    version = python_version(base)
    if version is None or version < OBAN_MIN_PYTHON:
        return None, f"needs Python 3.12 or later: {base} is {version or 'not runnable'}"
    folder = cache_folder() / f"{OBAN_REQUIREMENT.replace('==', '-')}-py{version[0]}.{version[1]}"
    try:
        return str(oban_venv(base, folder)), ""
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        return None, f"its virtual environment could not be made in {folder}: {error}"


def oban_venv(base: str, folder: Path) -> Path:
    """The Python of a virtual environment in ``folder`` holding OBAN_REQUIREMENT; made,
    from ``base``, when ``folder`` does not hold a finished one."""
    python, stamp = folder / "bin" / "python", folder / "installed.txt"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == OBAN_REQUIREMENT:
        return python
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    support.log(f"oban: making a virtual environment with {OBAN_REQUIREMENT} in {folder}")
    for args in (
        [base, "-m", "venv", str(folder)],
        [str(python), "-m", "pip", "install", "--quiet", OBAN_REQUIREMENT],
    ):
        result = subprocess.run(  # noqa: S603 (fixed argument lists, no shell)
            args, capture_output=True, text=True, timeout=OBAN_INSTALL_TIMEOUT, check=False
        )
        if result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeError(f"{' '.join(args[1:4])} failed: {lines[-1] if lines else '?'}")
    stamp.write_text(OBAN_REQUIREMENT, encoding="utf-8")
    return python


# ---- the rounds ------------------------------------------------------------------------

PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Config:
    """One way of running a peer: its database analyzed after each enqueue or not, and
    pgqueuer's dequeue batch size."""

    analyze: bool
    batch_size: int | None = None

    @property
    def name(self) -> str:
        text = "ANALYZE" if self.analyze else "no ANALYZE"
        return text if self.batch_size is None else f"{text}, batch {self.batch_size}"

    def env(self) -> dict[str, str]:
        if self.batch_size is None:
            return {}
        return {"BENCH_PGQUEUER_BATCH_SIZE": str(self.batch_size)}


def configs(name: str) -> list[Config]:
    sizes: Sequence[int | None] = PGQUEUER_BATCH_SIZES if name == "pgqueuer" else (None,)
    return [Config(analyze, size) for analyze in (False, True) for size in sizes]


class PeerRun:
    """Both rounds of one peer in one configuration, in a throwaway database of its own."""

    def __init__(
        self,
        peer: Peer,
        python: str,
        size: rounds.Sizes,
        processes: rounds.Processes,
        redis_pid: int,
    ) -> None:
        self.peer = peer
        self.size = size
        self.processes = processes
        self.redis_pid = redis_pid
        self.command = [python, "-m", "bench._peer_cli", peer.name]

    def run(self, admin_url: str, config: Config, repetition: int) -> rounds.Outcome:
        outcome = rounds.Outcome()
        env = rounds.subprocess_env(**config.env())
        with (
            support.throwaway_postgres(admin_url) as url,
            psycopg.connect(url, autocommit=True) as conn,
        ):
            self._setup(url, env)
            groups = rounds.base_groups(url.rpartition("/")[2], self.redis_pid)
            for number, workers in enumerate(rounds.WORKER_COUNTS, start=1):
                of = rounds.RoundOf(
                    self.peer.name, config.name, repetition, workers, self.size.jobs
                )
                row, cpu = self._round(conn, url, of, number, (config, env, groups))
                outcome.rows.append(row)
                outcome.cpu += cpu
                what = rounds.label(f"{self.peer.name} ({config.name})", workers)
                outcome.checks.append(f"{what}: {row.note}")
        return outcome

    def _setup(self, url: str, env: dict[str, str]) -> None:
        support.log(f"{self.peer.name}: installing its schema")
        self.processes.run(f"{self.peer.name}-setup", [*self.command, "setup", "--dsn", url], env)

    def _round(
        self,
        conn: psycopg.Connection[TupleRow],
        url: str,
        of: rounds.RoundOf,
        number: int,
        how: tuple[Config, dict[str, str], rounds.Groups],
    ) -> tuple[rounds.Row, list[rounds.CpuRow]]:
        config, env, groups = how
        jobs, name = self.size.jobs, self.peer.name
        label = rounds.label(f"{name} ({config.name})", of.workers)
        mark = int(one(conn, self.peer.mark_sql)[0])
        begun = rounds.cpu_sample(groups)
        seconds, client_cpu = self._enqueue(url, f"{name}-enqueue-r{number}", label, env)
        if config.analyze:
            support.analyze(conn, label)
        # A committed job is ready for a worker: accepted and leasable at once.
        enqueued = rounds.Enqueued(begun, seconds, seconds, client_cpu)
        folder = self.processes.folder / f"{name}-starts-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        worker_env = env | {starts.FOLDER_VARIABLE: str(folder)}
        spawned_at = time.time()
        spawned = [
            self.processes.start(
                f"{name}-worker-r{number}-{k}",
                [*self.command, "work", "--dsn", url, "--slots", str(self.size.slots)],
                worker_env,
            )
            for k in range(of.workers)
        ]
        try:
            drained = rounds.watch_drain(
                label,
                jobs,
                count=lambda: int(one(conn, self.peer.done_sql, (mark,))[0]),
                watch=spawned,
                processes=self.processes,
                groups=groups | {"worker": rounds.tree_of(spawned)},
                starts_folder=folder,
                spawned=spawned_at,
            )
        finally:  # also on Ctrl-C: before the database they use is dropped
            for process in spawned:
                self.processes.stop(process)
        note = check(audit(conn, self.peer), jobs * number)
        return rounds.round_rows(of, enqueued, drained, note)

    def _enqueue(self, url: str, name: str, label: str, env: dict[str, str]) -> tuple[float, float]:
        """Seconds the library's enqueue calls took, and the CPU time its process spent on
        them, as that process measured them."""
        jobs = self.size.jobs
        result = self.processes.folder / f"{name}.json"
        support.log(f"{label}: enqueueing {jobs:,} jobs, {ENQUEUE_CHUNK:,} a call")
        args = ["enqueue", "--dsn", url, "--jobs", str(jobs), "--chunk", str(ENQUEUE_CHUNK)]
        self.processes.run(name, [*self.command, *args, "--result", str(result)], env)
        found = json.loads(result.read_text(encoding="utf-8"))
        seconds = float(found["seconds"])
        support.log(f"{label}: {jobs:,} enqueued in {seconds:.2f}s ({jobs / seconds:,.0f}/s)")
        return seconds, float(found["cpu_seconds"])

    def probe(self, admin_url: str, config: Config, samples: int, gap: float) -> list[Probe]:
        """The start latency at low load: one job at a time to one worker (pgqueuer)."""
        name = self.peer.name
        env = rounds.subprocess_env(**config.env())
        log = self.processes.folder / f"{name}-probe-starts.txt"
        result = self.processes.folder / f"{name}-probe.json"
        with support.throwaway_postgres(admin_url) as url:
            self._setup(url, env)
            worker = self.processes.start(
                f"{name}-probe-worker",
                [*self.command, "work", "--dsn", url, "--slots", str(self.size.slots)],
                env | {starts.LOG_VARIABLE: str(log)},
            )
            try:
                support.log(f"{name}: start latency, {samples} jobs one at a time")
                args = ["probe", "--dsn", url, "--samples", str(samples), "--gap", str(gap)]
                self.processes.run(
                    f"{name}-probe", [*self.command, *args, "--result", str(result)], env
                )
                sent = json.loads(result.read_text(encoding="utf-8"))
                keys = {key for key, _, _ in sent}
                support.wait_for(
                    lambda: keys <= starts.logged(log).keys(),
                    PROBE_TIMEOUT,
                    f"{name}: every probe job started",
                    poll=0.1,
                )
            finally:
                self.processes.stop(worker)
        started = starts.logged(log)
        return [Probe(begun, answered, started[key], None) for key, begun, answered in sent]


@dataclass(frozen=True)
class Probe:
    """One job of a start-latency probe, Unix times."""

    sent: float  # just before the enqueue call
    answered: float  # as it returned
    started: float  # as the handler started
    waited: float | None  # as the client's wait for it returned (jobledger)


def one(
    conn: psycopg.Connection[TupleRow], query: LiteralString, params: Sequence[object] = ()
) -> tuple[int | float, ...]:
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return tuple(_number(value) for value in row)


def _number(value: object) -> int | float:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return float(str(value))  # numeric comes back as Decimal


def audit(conn: psycopg.Connection[TupleRow], peer: Peer) -> Audit:
    completed, completed_jobs, runs, left, other = (int(v) for v in one(conn, peer.audit_sql))
    return Audit(completed, completed_jobs, runs, left, other)


def check(counts: Audit, expected: int) -> str:
    """Every job so far completed exactly once; raises if not. The note for the table."""
    problems = []
    if counts.completed != expected or counts.completed_jobs != expected:
        problems.append(
            f"{counts.completed:,} completions of {counts.completed_jobs:,} jobs,"
            f" expected {expected:,}"
        )
    if counts.left:
        problems.append(f"{counts.left:,} jobs not completed")
    if counts.other:
        problems.append(f"{counts.other:,} records of retries or failures")
    if problems:
        raise RuntimeError("the tables disagree: " + "; ".join(problems))
    note = f"{counts.completed:,} completed once each, 0 left"
    if counts.runs != expected:
        note += f"; {counts.runs - expected:,} extra starts"
    return note


def run_peer(
    name: str,
    *,
    python: str,
    admin_url: str,
    size: rounds.Sizes,
    processes: rounds.Processes,
    redis_pid: int,
    repetition: int,
) -> rounds.Outcome:
    """Every configuration of a peer (``configs``), one after the other."""
    peer = PEERS[name]
    outcome = rounds.Outcome()
    for config in configs(name):
        run = PeerRun(peer, python, size, processes, redis_pid)
        outcome.add(run.run(admin_url, config, repetition))
    outcome.versions[name] = rounds.versions(python, peer.modules)
    return outcome
