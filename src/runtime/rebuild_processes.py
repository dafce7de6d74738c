"""The shares of a read-model rebuild, each folded in a process of its own.

Python folds one event at a time on one core; a rebuild of a long log spreads the
executions' streams over processes (``projections.read_model_parts``). Each is a new
interpreter running ``jobledger.rebuild_part``, not a fork: the caller may be
an API process with threads and open connections. Each builds its own objects from the
settings, folds its share into the new tables and sends back what the merge needs;
while they run, they say how far they are. A share that fails (or dies) fails the
rebuild, which then leaves the live tables as they were.
"""

import contextlib
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import psycopg
import structlog

from jobledger.infra.errors import RebuildPartError
from jobledger.infra.settings import Settings
from jobledger.projections.read_models.parts import Part, PartResult

log = structlog.get_logger(__name__)

# Below this many events a rebuild folds in the calling process: starting a process
# (an interpreter and its imports) costs about a second.
MIN_EVENTS = 200_000


class ProcessParts:
    """Runs a rebuild's shares in processes of their own (``PartRunner``)."""

    def __init__(
        self, settings: Settings, processes: int, *, page_size: int, min_events: int = MIN_EVENTS
    ) -> None:
        self.processes = processes
        self._settings = settings
        self._page_size = page_size
        self._min_events = min_events

    def worth_it(self, events: int) -> bool:
        # An embedded interpreter may not know the program that would start the shares.
        return self.processes > 1 and events >= self._min_events and bool(sys.executable)

    @contextlib.contextmanager
    def start(self, parts: Sequence[Part]) -> Iterator["RunningProcesses"]:
        running = RunningProcesses()
        try:
            for part in parts:
                running.add(part, pickle.dumps((self._settings, part, self._page_size)))
            yield running
        finally:
            running.stop()


class RunningProcesses:
    """The shares' processes; a thread per process reads its answers into one queue."""

    def __init__(self) -> None:
        self._processes: list[subprocess.Popen[bytes]] = []
        self._messages: queue.Queue[tuple[Any, ...]] = queue.Queue()

    @property
    def pids(self) -> list[int]:
        """The shares' process ids, in index order."""
        return [process.pid for process in self._processes]

    def add(self, part: Part, task: bytes) -> None:
        # A module run on its own, not multiprocessing: a spawned child imports the
        # caller's main module again, which a script without a main guard cannot take.
        process = subprocess.Popen(
            [sys.executable, "-m", "jobledger.rebuild_part"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._processes.append(process)
        assert process.stdin is not None  # noqa: S101 (set by stdin=PIPE)
        assert process.stdout is not None  # noqa: S101 (set by stdout=PIPE)
        with process.stdin:
            process.stdin.write(task)
        reader = threading.Thread(
            target=_read_answers,
            args=(part.index, process.stdout, self._messages),
            name=f"jobledger-rebuild-{part.index}",
            daemon=True,
        )
        reader.start()

    def wait(self, reached: Callable[[int, int], None]) -> list[PartResult]:
        results: dict[int, PartResult] = {}
        while len(results) < len(self._processes):
            match self._messages.get():
                case ("reached", int(index), int(position)):
                    reached(index, position)
                case ("done", int(index), PartResult() as result):
                    results[index] = result
                case ("failed", int(index), str(error), bool(outage)):
                    raise _failure(index, error, outage=outage)
                case ("ended", int(index)):
                    code = self._processes[index].wait()
                    msg = f"share {index} of the rebuild ended without an answer (exit code {code})"
                    raise RebuildPartError(msg)
        return [results[index] for index in sorted(results)]

    def stop(self) -> None:
        """End the processes still running (a failed rebuild), and reap them all."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            process.wait(timeout=30)


def _read_answers(index: int, answers: IO[bytes], messages: "queue.Queue[tuple[Any, ...]]") -> None:
    with answers:
        while header := answers.read(_HEADER.size):
            (size,) = _HEADER.unpack(header)
            message = pickle.loads(answers.read(size))  # noqa: S301 (our own child's answer)
            messages.put(message)
            if message[0] in {"done", "failed"}:
                return
    messages.put(("ended", index))


_HEADER = struct.Struct(">Q")


def _failure(index: int, error: str, *, outage: bool) -> Exception:
    message = f"share {index} of the rebuild failed: {error}"
    # An outage stays one: the rebuild is then retried, not done another way.
    return psycopg.OperationalError(message) if outage else RebuildPartError(message)


def answer(out: IO[bytes], message: tuple[Any, ...]) -> None:
    """Send ``message`` to the rebuild (a share's process)."""
    data = pickle.dumps(message)
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()
