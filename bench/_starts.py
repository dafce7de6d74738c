"""When the handlers of throughput.py start, told by the worker processes themselves.

Every system's no-op handler calls ``note`` as it starts. With ``BENCH_STARTS_DIR`` set,
the first call in a process writes one file there, named by its process id, holding
the wall time (``time.time()``) and the CPU time the process had used so far
(``time.process_time()``: every thread's user and system time, as ``/proc/<pid>/stat``
counts it). The benchmark reads those files for the first handler start of a round,
where its drain begins, and for each worker's start-up CPU (importing, connecting),
which a long-running deployment pays once and the per-job figures leave out. With
``BENCH_STARTS_LOG`` set, every call appends ``key time`` to that file: the start
latency probes. Only the standard library: the peers' interpreters import it too.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

FOLDER_VARIABLE = "BENCH_STARTS_DIR"
LOG_VARIABLE = "BENCH_STARTS_LOG"

_lock = threading.Lock()
_noted = False


def note(key: str = "") -> float:
    """The handler's start (Unix time); written down as the variables ask."""
    global _noted  # noqa: PLW0603 (once per process)
    now = time.time()
    if not _noted:
        with _lock:
            folder = os.environ.get(FOLDER_VARIABLE)
            if not _noted and folder:
                text = f"{now} {time.process_time()}"
                partial = Path(folder, f".{os.getpid()}")
                partial.write_text(text, encoding="ascii")
                partial.rename(partial.with_name(str(os.getpid())))  # seen whole or not
            _noted = True
    log = os.environ.get(LOG_VARIABLE)
    if log:
        with _lock, Path(log).open("a", encoding="ascii") as file:
            file.write(f"{key} {now}\n")
    return now


@dataclass(frozen=True)
class First:
    """The first handler start of a round, and each worker process's CPU by then."""

    at: float  # Unix time
    boot_cpu: dict[int, float]  # pid: CPU seconds used before its first handler start


def first(folder: Path) -> First | None:
    """What the worker processes wrote into ``folder`` so far; None before any start."""
    times, cpu = [], {}
    for path in folder.iterdir():
        if not path.name.isdigit():
            continue
        parts = path.read_text(encoding="ascii").split()
        times.append(float(parts[0]))
        cpu[int(path.name)] = float(parts[1])
    return First(min(times), cpu) if times else None


def logged(path: Path) -> dict[str, float]:
    """The starts ``BENCH_STARTS_LOG`` collected: key: Unix time (the first one)."""
    found: dict[str, float] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="ascii").splitlines():
        key, _, value = line.rpartition(" ")
        found.setdefault(key, float(value))
    return found
