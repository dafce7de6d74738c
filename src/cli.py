"""The `jobledger` command."""

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import redis

from jobledger.domain.errors import DomainError
from jobledger.projections.queue_projection import verify_queue
from jobledger.runtime.bootstrap import Container, bootstrap
from jobledger.runtime.errors import RuntimeLayerError
from jobledger.runtime.logging import configure_logging
from jobledger.runtime.progress import ProgressBar
from jobledger.runtime.settings import PREFIX, Settings, load_settings
from jobledger.runtime.store import migrate

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobledger",
        description="A cron-capable job scheduler whose source of truth is an event log.",
    )
    for name in Settings.__struct_fields__:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            help=f"overrides {PREFIX}{name.upper()}",
        )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("migrate", help="create the event tables and apply migrations")
    commands.add_parser("status", help="show the event store and its position")
    commands.add_parser("config", help="print the effective settings, secrets masked")
    commands.add_parser("projector", help="follow the log into the queue until stopped")
    queue = commands.add_parser("queue", help="the work queue (a projection of the log)")
    queue_commands = queue.add_subparsers(dest="queue_command", required=True, metavar="ACTION")
    rebuild = queue_commands.add_parser("rebuild", help="rebuild the queue from the log")
    rebuild.add_argument(
        "--full", action="store_true", help="replay the whole log, not the open executions"
    )
    queue_commands.add_parser("verify", help="compare the queue with a fold of the log")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {name: getattr(args, name) for name in Settings.__struct_fields__}
    try:
        settings = load_settings(os.environ, **overrides)
        configure_logging(settings)
        return _run(args, settings)
    except (RuntimeLayerError, DomainError) as error:
        print(f"jobledger: {error}", file=sys.stderr)
    except redis.RedisError as error:
        detail = " ".join(str(error).split())
        print(f"jobledger: cannot reach Redis (JOBLEDGER_REDIS_URL): {detail}", file=sys.stderr)
    return EXIT_USER_ERROR


def _run(args: argparse.Namespace, settings: Settings) -> int:
    command: str = args.command
    if command == "migrate":
        migrate(settings)
        return 0
    if command == "config":
        _print_json(settings.masked())
        return 0
    with bootstrap(settings) as container:
        if command == "status":
            _print_json(container.ledger.describe())
            return 0
        if command == "projector":
            return _run_projector(container)
        if args.queue_command == "rebuild":
            return _rebuild_queue(container, full=args.full)
        return _verify_queue(container)


def _rebuild_queue(container: Container, *, full: bool) -> int:
    projection = container.projector().queue
    bar = ProgressBar("rebuilding queue")
    report = projection.rebuild(full=full, progress=bar)
    bar.finish()
    print(
        f"queue rebuilt from the {report.source}: {report.items:,} open executions, "
        f"position {report.position:,}" + (f", {report.events:,} events" if report.events else "")
    )
    return 0


def _verify_queue(container: Container) -> int:
    differences = verify_queue(container.reader(), container.queue)
    for line in differences:
        print(line)
    if differences:
        print(f"{len(differences)} difference(s) between the queue and the log")
        return 1
    print("the queue matches the log")
    return 0


def _run_projector(container: Container) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    projector = container.projector()
    projector.start()
    stop.wait()
    projector.stop()
    return 0


def _print_json(value: dict[str, Any]) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
