"""The `jobledger` command."""

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from jobledger.domain.errors import DomainError
from jobledger.runtime.bootstrap import bootstrap
from jobledger.runtime.errors import RuntimeLayerError
from jobledger.runtime.logging import configure_logging
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {name: getattr(args, name) for name in Settings.__struct_fields__}
    try:
        settings = load_settings(os.environ, **overrides)
        configure_logging(settings)
        return _run(args.command, settings)
    except (RuntimeLayerError, DomainError) as error:
        print(f"jobledger: {error}", file=sys.stderr)
        return EXIT_USER_ERROR


def _run(command: str, settings: Settings) -> int:
    if command == "migrate":
        migrate(settings)
    elif command == "config":
        _print_json(settings.masked())
    elif command == "status":
        with bootstrap(settings) as container:
            _print_json(container.ledger.describe())
    return 0


def _print_json(value: dict[str, Any]) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
