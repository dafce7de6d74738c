"""``jobledger apply``: the jobs code declares (``@jobledger.periodic`` in a module, or a
TOML file), planned against a running jobledger and applied through its API
(``POST /api/v1/jobs:apply``) as one set. The events record the token's user.

The set has a scope (``--scope``, else the module's name or the file's path): its jobs
record it, and ``--prune`` deletes only managed jobs of that scope, so two modules
applied with ``--prune`` keep each other's jobs (ADR 82)."""

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from jobledger.client import Client, JobledgerError
from jobledger.declarations import DeclarationError, JobsFile, jobs_of_module, read_jobs_file
from jobledger.schemas.jobs import ApplyOut, PlannedChange
from jobledger.schemas.notifications import NotificationsApplyOut

EXIT_REFUSED = 2
_SIGNS = {"create": "+", "update": "~", "unchanged": "=", "delete": "-"}


def add_parser(commands: "argparse._SubParsersAction[Any]") -> None:
    apply = commands.add_parser(
        "apply", help="create, update or delete the jobs code declares, through the API"
    )
    source = apply.add_mutually_exclusive_group(required=True)
    source.add_argument("--module", help="a module whose @jobledger.periodic jobs to apply")
    source.add_argument(
        "--file", type=Path, help="a TOML file of [[jobs]] (and [[notifications]]) to apply"
    )
    apply.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    apply.add_argument(
        "--prune",
        action="store_true",
        help="delete the managed jobs of the scope that are no longer declared",
    )
    apply.add_argument(
        "--scope",
        help="the set the jobs belong to, which --prune keeps to "
        "(default: the --module's name, or the --file's path as given)",
    )
    apply.add_argument("--url", help="the API (default $JOBLEDGER_URL, else 127.0.0.1:8000)")
    apply.add_argument("--token", help="an API token (default $JOBLEDGER_TOKEN)")


def run(args: argparse.Namespace, say: Callable[[str], None] = print) -> int:
    """Plan, print and (unless a dry run) apply; 2 when the set or a request is refused."""
    try:
        declared = _declared(args)
        with Client(args.url, args.token) as client:
            rules = _apply_rules(client, declared, args, dry_run=True)  # refused: nothing written
            outcome = client.apply(
                declared.jobs, prune=args.prune, dry_run=args.dry_run, scope=scope_of(args)
            )
            if not args.dry_run:
                rules = _apply_rules(client, declared, args, dry_run=False)
            target = client.connection.target.url
    except DeclarationError as error:
        print(f"jobledger apply: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except JobledgerError as error:
        where = f" ({error.field})" if error.field else ""
        print(f"jobledger apply: refused{where}: {error}", file=sys.stderr)
        return EXIT_REFUSED
    for line in plan_lines(outcome, target=target, dry_run=args.dry_run):
        say(line)
    if rules is not None:
        for line in rule_lines(rules):
            say(line)
    return 0


def _apply_rules(
    client: Client, declared: JobsFile, args: argparse.Namespace, *, dry_run: bool
) -> NotificationsApplyOut | None:
    """The file's notification rules as the scope's set. Only where the file has some:
    applying jobs is an operator's, rules an admin's, and a file without rules leaves
    them alone."""
    if not declared.notifications:
        return None
    return client.apply_notifications(
        declared.notifications, scope=scope_of(args), prune=args.prune, dry_run=dry_run
    )


def scope_of(args: argparse.Namespace) -> str:
    """The scope of the set: ``--scope``, else the module's name or the file's path."""
    if args.scope:
        return str(args.scope)
    return str(args.module) if args.module else Path(args.file).as_posix()


def _declared(args: argparse.Namespace) -> JobsFile:
    if args.module:
        jobs = jobs_of_module(args.module)
        if not jobs:
            raise DeclarationError(
                f"module {args.module!r} declares no job; put @jobledger.periodic(...) above "
                "a @jobledger.handler(...)"
            )
        return JobsFile(jobs=jobs)
    return read_jobs_file(args.file)


def plan_lines(outcome: ApplyOut, *, target: str, dry_run: bool) -> list[str]:
    """The plan as a person reads it: one line per job, the changed fields below an
    update, a count, and what happened."""
    lines = [f"Plan against {target}:"]
    for change in outcome.plan:
        lines += _change_lines(change)
    lines.append(_counted(change.action for change in outcome.plan))
    if dry_run:
        lines.append("Dry run: nothing was changed.")
    elif outcome.applied:
        lines.append("Applied.")
    else:
        lines.append("Nothing to change.")
    return lines


def rule_lines(outcome: NotificationsApplyOut) -> list[str]:
    """The notification rules' plan: one line per rule, and a count."""
    lines = ["Notification rules:"]
    lines += [f"  {_SIGNS[step.action]} {step.action:<9} {step.name}" for step in outcome.plan]
    lines.append(_counted(step.action for step in outcome.plan))
    return lines


def _counted(actions: Iterable[str]) -> str:
    counts = dict.fromkeys(_SIGNS, 0)
    for action in actions:
        counts[action] += 1
    return (
        f"{counts['create']} to create, {counts['update']} to update, "
        f"{counts['delete']} to delete, {counts['unchanged']} unchanged."
    )


def _change_lines(change: PlannedChange) -> list[str]:
    lines = [f"  {_SIGNS[change.action]} {change.action:<9} {change.key}  ({change.job_id})"]
    lines += [
        f"      {field.field}: {_shown(field.old)} -> {_shown(field.new)}"
        for field in change.changes
    ]
    return lines


def _shown(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
