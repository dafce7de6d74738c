"""The command line of the PostgreSQL queues' task modules for throughput.py.

    python -m bench._peer_cli SYSTEM setup   --dsn URL
    python -m bench._peer_cli SYSTEM enqueue --dsn URL --jobs N --chunk C --result FILE
    python -m bench._peer_cli SYSTEM work    --dsn URL --slots S
    python -m bench._peer_cli pgqueuer probe --dsn URL --samples N --gap SECONDS --result FILE

SYSTEM is pgqueuer, procrastinate or oban, whose module ``bench._SYSTEM_tasks`` holds
``setup(dsn)``, ``sender(dsn)``, ``work(dsn, slots)`` and ``ON_UVLOOP``. ``setup``
installs the library's schema; ``enqueue`` opens the library's client, then adds N
no-op jobs C at a time and writes the seconds those calls took (connecting not
included), and the CPU time this process spent on them, as JSON to FILE; ``work``
runs a worker until SIGTERM; ``probe`` (pgqueuer's module only) enqueues one job at a
time for the start latency and writes when each call was made and returned. The benchmark starts
each as a process of its own, with the interpreter the library needs (Oban for Python
runs on Python 3.12 or later, in a virtual environment of its own), so this file
imports nothing but the standard library. The task modules are imported by name, not
run as ``__main__``: the libraries name a task by its module.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence
    from contextlib import AbstractAsyncContextManager

    Send = Callable[[int], Awaitable[object]]  # adds that many jobs

SYSTEMS = ("pgqueuer", "procrastinate", "oban")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("system", choices=SYSTEMS)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("setup", "enqueue", "work", "probe"):
        command = commands.add_parser(name)
        command.add_argument("--dsn", required=True, help="the PostgreSQL database")
    enqueue = commands.choices["enqueue"]
    enqueue.add_argument("--jobs", type=int, required=True)
    enqueue.add_argument("--chunk", type=int, required=True, help="jobs per call")
    probe = commands.choices["probe"]
    probe.add_argument("--samples", type=int, required=True)
    probe.add_argument("--gap", type=float, required=True, help="seconds between jobs")
    for command in (enqueue, probe):
        command.add_argument("--result", type=Path, required=True, help="JSON file to write")
    commands.choices["work"].add_argument("--slots", type=int, required=True)
    return parser.parse_args(argv)


async def enqueue(
    sender: Callable[[str], AbstractAsyncContextManager[Send]], args: argparse.Namespace
) -> None:
    async with sender(args.dsn) as send:
        begun, cpu = time.perf_counter(), time.process_time()
        for start in range(0, args.jobs, args.chunk):
            await send(min(args.chunk, args.jobs - start))
        seconds, cpu = time.perf_counter() - begun, time.process_time() - cpu
    result = {"jobs": args.jobs, "seconds": seconds, "cpu_seconds": cpu}
    args.result.write_text(json.dumps(result), encoding="utf-8")


async def probe(
    run: Callable[[str, int, float], Awaitable[list[tuple[str, float, float]]]],
    args: argparse.Namespace,
) -> None:
    sent = await run(args.dsn, args.samples, args.gap)
    args.result.write_text(json.dumps(sent), encoding="utf-8")


def run(coroutine: Coroutine[object, object, None], *, on_uvloop: bool) -> None:
    """On the event loop the library's own command line picks: uvloop for pgqueuer's and
    Oban's (where it is installed), asyncio's for Procrastinate's."""
    if on_uvloop:
        try:
            import uvloop  # noqa: PLC0415 (optional, as in those command lines)
        except ImportError:
            pass
        else:
            uvloop.run(coroutine)
            return
    asyncio.run(coroutine)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    tasks = importlib.import_module(f"bench._{args.system}_tasks")
    if args.command == "setup":
        coroutine = tasks.setup(args.dsn)
    elif args.command == "enqueue":
        coroutine = enqueue(tasks.sender, args)
    elif args.command == "probe":
        coroutine = probe(tasks.probe, args)
    else:
        coroutine = tasks.work(args.dsn, args.slots)
    run(coroutine, on_uvloop=tasks.ON_UVLOOP)


if __name__ == "__main__":
    main()
