"""The `jobledger` command."""

import argparse
import getpass
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import redis
import structlog

from jobledger import apply_cli, job_cli, token_cli
from jobledger.bootstrap import (
    Container,
    PartOptions,
    bootstrap,
    build_services,
    migrate,
    name_connections,
    preflight,
    role_parts,
    run_dev,
    wait_for_stores,
)
from jobledger.domain.clock import utc_now
from jobledger.domain.errors import DomainError
from jobledger.domain.instants import check_instant
from jobledger.domain.policies import BackfillOverlap
from jobledger.domain.schedules import (
    CronSchedule,
    upcoming_fires,
    validate_schedule,
)
from jobledger.infra.errors import RuntimeLayerError, SettingsError
from jobledger.infra.logging import configure_logging
from jobledger.infra.progress import ProgressBar
from jobledger.infra.settings import PREFIX, Settings, load_settings, mask_url
from jobledger.runtime.dev import DevOptions
from jobledger.runtime.lifecycle import (
    run_parts,
    stop_on_signals,
)
from jobledger.schemas.limits import LimitValuesIn
from jobledger.services.actors import Actor, operator_of_store
from jobledger.services.admin import QuarantinedEvent, RetryReport, event_type
from jobledger.services.application import Services
from jobledger.services.dead_letters import BulkReport, DeadLetterFilter
from jobledger.services.demo import seed_demo_jobs
from jobledger.services.errors import ServiceError

log = structlog.get_logger(__name__)

EXIT_USER_ERROR = 2
MAX_PREVIEW = 1000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobledger",
        # The commands come first in the help; the settings, many, in their own section.
        usage="jobledger [--SETTING VALUE ...] COMMAND [ARGS]",
        # Every setting is a flag (--archive-dir, ...): a prefix of one must not stand
        # for it, or a command's own flag that is a prefix (audit --archive) is ambiguous.
        allow_abbrev=False,
        description="A cron-capable job scheduler whose source of truth is an event log.",
        epilog="`jobledger COMMAND --help` shows a command's own flags; "
        "`jobledger help settings` lists only the settings.",
    )
    commands = parser.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND"
    )
    commands.add_parser("migrate", help="create the event tables and apply migrations")
    commands.add_parser("status", help="show the event store and its position")
    commands.add_parser("config", help="print the effective settings, secrets masked")
    dev = commands.add_parser(
        "dev", help="run everything in one process: migrate, projector, scheduler, worker, API"
    )
    dev.add_argument("--no-demo", action="store_true", help="do not create the demo jobs")
    commands.add_parser("seed", help="create the demo jobs (those that do not exist yet)")
    commands.add_parser("projector", help="follow the log into the queue until stopped")
    scheduler = commands.add_parser("scheduler", help="elect a leader and fire due jobs")
    scheduler.add_argument(
        "--with-projector", action="store_true", help="also run the projector in this process"
    )
    worker = commands.add_parser("worker", help="lease and run executions until stopped")
    worker.add_argument(
        "--with-projector", action="store_true", help="also run the projector in this process"
    )
    _add_dead_letter_commands(commands)
    schedule = commands.add_parser("schedule", help="check a schedule before saving it")
    schedule_commands = schedule.add_subparsers(
        dest="schedule_command", required=True, metavar="ACTION"
    )
    preview = schedule_commands.add_parser("preview", help="print the next fire times")
    preview.add_argument("cron", help='a 5-field cron, e.g. "30 2 * * *"')
    preview.add_argument("--tz", default="UTC", help="an IANA time zone (default UTC)")
    preview.add_argument("--count", type=int, default=10, help="how many fires (default 10)")
    preview.add_argument("--from", dest="start", help="start after this ISO time (default now)")
    queue = commands.add_parser("queue", help="the work queue (a projection of the log)")
    queue_commands = queue.add_subparsers(dest="queue_command", required=True, metavar="ACTION")
    rebuild = queue_commands.add_parser("rebuild", help="rebuild the queue from the log")
    rebuild.add_argument(
        "--full", action="store_true", help="replay the whole log, not the open executions"
    )
    queue_commands.add_parser("verify", help="compare the queue with a fold of the log")
    _add_steering_commands(queue_commands)
    _add_limit_commands(commands)
    _add_projection_commands(commands)
    _add_job_commands(commands)
    _add_archive_commands(commands)
    apply_cli.add_parser(commands)
    token_cli.add_parser(commands)
    helping = commands.add_parser("help", help="this help, or `help settings`: the settings")
    helping.add_argument("topic", nargs="?", choices=("settings",), help="settings")
    _add_setting_flags(parser)  # after the commands, in the help too
    return parser


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per setting, in a section of its own after the commands."""
    settings = parser.add_argument_group(
        "settings",
        f"Each flag overrides its {PREFIX}* environment variable, for any command.",
    )
    for name in Settings.__struct_fields__:
        settings.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            metavar="VALUE",
            help=f"overrides {PREFIX}{name.upper()}",
        )


def _print_help(topic: str | None) -> int:
    if topic is None:
        build_parser().print_help()
        return 0
    only = argparse.ArgumentParser(
        prog="jobledger", usage="jobledger [--SETTING VALUE ...] COMMAND [ARGS]", add_help=False
    )
    _add_setting_flags(only)
    only.print_help()
    return 0


# The queue commands that work on this process's own copy of the queue.
_QUEUE_COPIES = frozenset({"rebuild", "verify"})


def _add_steering_commands(queue_commands: "argparse._SubParsersAction[Any]") -> None:
    """``queue pause|resume|drain NAME``: events in the log, whatever holds the queue."""
    helps = {
        "pause": "stop leasing from a queue (running work finishes)",
        "resume": "lease from a paused queue again",
        "drain": "cancel a queue's pending runs (running ones finish)",
    }
    for action, text in helps.items():
        steer = queue_commands.add_parser(action, help=text)
        steer.add_argument("name", metavar="NAME", help="the queue's name")
        steer.add_argument("--by", help="who acts (recorded; default: this login)")
        if action != "resume":
            steer.add_argument("--reason", required=True, help="why (recorded in the event)")
        if action == "drain":
            steer.add_argument("--dry-run", action="store_true", help="only list the runs")


def _add_limit_commands(commands: "argparse._SubParsersAction[Any]") -> None:
    """``limit list``, ``limit set NAME`` and ``limit delete NAME``: the named limits,
    as the API has them."""
    limit = commands.add_parser("limit", help="named concurrency and rate limits")
    actions = limit.add_subparsers(dest="limit_command", required=True, metavar="ACTION")
    actions.add_parser("list", help="the named limits, and every key in use or waited for")
    values = actions.add_parser("set", help="create a named limit, or change its values")
    values.add_argument("name", metavar="NAME", help="the key runs name, e.g. stripe")
    values.add_argument("--concurrency", type=int, help="runs with the key at once")
    values.add_argument("--rate", type=int, help="starts with the key per --per seconds")
    values.add_argument("--per", type=float, dest="per_seconds", help="the rate's period (s)")
    values.add_argument("--by", help="who acts (recorded; default: this login)")
    gone = actions.add_parser("delete", help="stop applying a named limit")
    gone.add_argument("name", metavar="NAME", help="the limit's key")
    gone.add_argument("--by", help="who acts (recorded; default: this login)")


def _add_projection_commands(commands: "argparse._SubParsersAction[Any]") -> None:
    projections = commands.add_parser("projections", help="the read models of the API")
    actions = projections.add_subparsers(
        dest="projections_command", required=True, metavar="ACTION"
    )
    actions.add_parser("rebuild", help="empty the read models and replay the whole log")
    quarantine = actions.add_parser("quarantine", help="events a follower could not apply")
    steps = quarantine.add_subparsers(dest="quarantine_command", required=True, metavar="ACTION")
    listing = steps.add_parser("list", help="list the quarantined events")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    again = steps.add_parser(
        "retry", help="apply quarantined events again, in the follower each failed in"
    )
    which = again.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--id", dest="ids", type=int, action="append", help="this one (and its stream before it)"
    )
    which.add_argument("--all", action="store_true", help="every quarantined event")
    drop = steps.add_parser(
        "drop", help="give up on quarantined events: the follower's state goes on without them"
    )
    drop.add_argument(
        "--id",
        dest="ids",
        type=int,
        action="append",
        required=True,
        help="this one, with the later events of its stream in that follower",
    )
    drop.add_argument("--by", required=True, help="who decides (logged)")
    drop.add_argument("--reason", required=True, help="why (logged)")


def _add_dead_letter_commands(commands: "argparse._SubParsersAction[Any]") -> None:
    api = commands.add_parser("api", help="serve the REST API until stopped")
    api.add_argument(
        "--with-projector", action="store_true", help="also run the projector in this process"
    )
    dlq = commands.add_parser("dlq", help="dead letters: list, show, requeue, discard")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    listing = dlq_commands.add_parser("list", help="list dead letters")
    requeue = dlq_commands.add_parser("requeue", help="give dead letters a new attempt budget")
    discard = dlq_commands.add_parser("discard", help="give up on dead letters for good")
    for sub in (listing, requeue, discard):
        sub.add_argument("--queue", help="only this queue")
        sub.add_argument("--handler", help="only this handler, e.g. http.webhook")
    for sub, verb in ((requeue, "requeued"), (discard, "discarded")):
        sub.add_argument("--id", dest="ids", type=uuid.UUID, action="append", help="only this one")
        sub.add_argument("--error-contains", help="only those whose last error has this text")
        sub.add_argument("--by", required=True, help="who acts (recorded in the event)")
        sub.add_argument("--reason", required=True, help="why (recorded in the event)")
        sub.add_argument("--dry-run", action="store_true", help=f"only count what would be {verb}")
    show = dlq_commands.add_parser("show", help="every event of one execution")
    show.add_argument("execution_id", type=uuid.UUID, help="the execution id")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {name: getattr(args, name) for name in Settings.__struct_fields__}
    try:
        settings = load_settings(os.environ, **overrides)
        if args.command == "dev":
            settings = msgspec.structs.replace(settings, mode="dev")
        configure_logging(settings)
        return _run(args, settings)
    except ServiceError as error:
        # A use case's error keeps its fix apart (the API answers it as a field).
        fix = f"; {error.fix}" if error.fix and error.fix not in error.message else ""
        print(f"jobledger: {error}{fix}", file=sys.stderr)
    except (RuntimeLayerError, DomainError) as error:
        print(f"jobledger: {error}", file=sys.stderr)
    except (redis.ConnectionError, redis.TimeoutError) as error:
        # The start check, or a one-shot command: a role that runs rides out an outage.
        detail = " ".join(str(error).split())
        print(
            f"jobledger: cannot reach Redis ({PREFIX}REDIS_URL={mask_url(settings.redis_url)}): "
            f"{detail}; check that redis-server runs at that host and port",
            file=sys.stderr,
        )
    except redis.RedisError as error:
        detail = " ".join(str(error).split())
        print(f"jobledger: Redis refused a command: {detail}", file=sys.stderr)
    return EXIT_USER_ERROR


def _run(args: argparse.Namespace, settings: Settings) -> int:
    command: str = args.command
    storeless = _without_store(args)
    if storeless is not None:
        return storeless()
    name_connections(command)
    if command == "migrate":
        migrate(settings)
        return 0
    if command == "config":
        return _print_json(settings.masked())
    if command == "dev":
        return _run_dev(args, settings)
    # Pause, resume and drain are events: the running process's queue follows them.
    if command == "queue" and not settings.redis_url and args.queue_command in _QUEUE_COPIES:
        _refuse_embedded_queue(args.queue_command)
    if command in _ROLES:
        wait_for_stores(settings)
    with bootstrap(settings, role=command) as container:
        if command in _ROLES:
            preflight(container)
        return _run_with(args, container)


def _without_store(args: argparse.Namespace) -> Callable[[], int] | None:
    """The commands that open no store: help, a schedule's preview, and the clients of
    a running API (apply, run, and the job actions but backfill), whose writes the API
    records with the token's user."""
    command: str = args.command
    if command == "help":
        return lambda: _print_help(args.topic)
    if command == "schedule":
        return lambda: _preview(args)
    if command == "apply":
        return lambda: apply_cli.run(args)
    if command == "run" or (command == "job" and args.job_command in job_cli.CLIENT_ACTIONS):
        return lambda: job_cli.run(args)
    return None


def _refuse_embedded_queue(action: str) -> None:
    """Without Redis the queue lives in the memory of the process that runs the roles
    (`jobledger dev`): one built here would be empty, and verifying or rebuilding it would
    only pretend."""
    route = (
        "GET /api/v1/admin/queue/verify"
        if action == "verify"
        else ("POST /api/v1/admin/queue/rebuild")
    )
    raise SettingsError(
        f"queue {action}: without {PREFIX}REDIS_URL the queue lives in memory in the running"
        f" `jobledger dev` process, not in this data folder; use its admin API ({route}),"
        f" or run against PostgreSQL and Redis ({PREFIX}DATABASE_URL, {PREFIX}REDIS_URL)"
    )


def _operator() -> str:
    """Who runs a CLI command, for the log: the login name of this process's user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


# The commands that run until stopped, and seed: they check every setting at start.
_ROLES = frozenset({"api", "scheduler", "worker", "projector", "seed"})


def _run_with(args: argparse.Namespace, container: Container) -> int:
    """The commands that need the wired objects of a running jobledger."""
    runners: dict[str, Callable[[], int]] = {
        "status": lambda: _print_json(_services(container).system.describe()),
        "projector": lambda: _run_role(container, "projector"),
        "api": lambda: _run_api(container, with_projector=args.with_projector),
        "scheduler": lambda: _run_role(container, "scheduler", args.with_projector),
        "worker": lambda: _run_role(container, "worker", args.with_projector),
        "dlq": lambda: _dead_letters(args, container),
        "queue": lambda: _queue(args, container),
        "limit": lambda: _limit(args, container),
        "projections": lambda: (
            _rebuild_read_models(container)
            if args.projections_command == "rebuild"
            else _quarantine(args, container)
        ),
        "seed": lambda: _seed(container),
        "job": lambda: _backfill(args, container),
        "archive": lambda: _archive(args, container),
        "audit": lambda: _audit(args, container),
        "token": lambda: token_cli.create(
            args, _services(container).accounts, admin=container.settings.admin_username
        ),
    }
    return runners[args.command]()


def _run_dev(args: argparse.Namespace, settings: Settings) -> int:
    migrate(settings)
    return run_dev(settings, _say, DevOptions(demo=not args.no_demo))


def _say(line: str) -> None:
    # Flushed at once: whoever started the process may be waiting for the URL on a pipe.
    print(line, flush=True)


def _seed(container: Container) -> int:
    if not container.settings.test_handlers_enabled:
        # The demo jobs run the test.* handlers, which no worker would have.
        raise SettingsError(
            f"the demo jobs run the test.* handlers, which are off in production mode; set "
            f"{PREFIX}TEST_HANDLERS=true for the API and the workers, or use jobledger dev"
        )
    at, by = utc_now(), operator_of_store("jobledger seed")
    for result in seed_demo_jobs(_services(container).jobs, at=at, by=by):
        reason = f": {result.reason}" if result.reason else ""
        print(f"{result.outcome} {result.name!r} ({result.job_id}){reason}")
    return 0


def _services(container: Container) -> Services:
    """The use cases, for the commands that call them (the roles below need none)."""
    return build_services(container)


def _dead_letters(args: argparse.Namespace, container: Container) -> int:
    services = _services(container)
    dead = services.dead_letters
    if args.dlq_command == "show":
        for entry in dead.show(args.execution_id):
            print(json.dumps(entry, default=str, sort_keys=True))
        return 0
    # The read models list dead letters; make sure they have every event of the log.
    services.admin.catch_up_read_models()
    selection = DeadLetterFilter(
        queue=args.queue,
        handler=args.handler,
        error_contains=getattr(args, "error_contains", None),
    )
    if args.dlq_command == "list":
        return _list_dead_letters(dead.page(selection, limit=100_000).items)
    ids = dead.matching(selection)
    if args.ids:
        wanted = set(args.ids)
        ids = [i for i in ids if i in wanted]
    by = operator_of_store(args.by)
    if args.dlq_command == "requeue":
        report = dead.requeue(
            ids,
            by=by,
            reason=args.reason,
            at=utc_now(),
            error_contains=args.error_contains,
            dry_run=args.dry_run,
        )
    else:
        report = dead.discard(
            ids, by=by, reason=args.reason, error_contains=args.error_contains, dry_run=args.dry_run
        )
    return _print_bulk(args.dlq_command, report)


def _list_dead_letters(rows: list[Any]) -> int:
    for row in rows:
        died = f"{row.finished_at:%Y-%m-%d %H:%M:%S}" if row.finished_at else "-"
        print(f"{row.id}  {row.queue}  attempts {row.attempt}  {died}")
    print(f"{len(rows)} dead letter(s)")
    return 0


def _print_bulk(action: str, report: BulkReport) -> int:
    verb = f"would {action}" if report.dry_run else action.rstrip("e") + "ed"
    done = report.matched if report.dry_run else report.changed
    print(f"{verb} {done} of {report.matched} matching dead letter(s); {report.refused} refused")
    return 0


def _queue(args: argparse.Namespace, container: Container) -> int:
    if args.queue_command == "rebuild":
        return _rebuild_queue(container, full=args.full)
    if args.queue_command == "verify":
        return _verify_queue(container)
    queues = _services(container).queues
    by = operator_of_store(args.by) if args.by else _cli_actor()
    if args.queue_command == "drain":
        report = queues.drain(
            args.name, reason=args.reason, at=utc_now(), by=by, dry_run=args.dry_run
        )
        for execution_id in report.cancelled:
            print(f"  {execution_id}")
        verb = "would cancel" if report.dry_run else "cancelled"
        print(f"{verb} {len(report.cancelled)} pending run(s) of queue {report.queue}")
        return 0
    if args.queue_command == "pause":
        done = queues.pause(args.name, reason=args.reason, at=utc_now(), by=by)
    else:
        done = queues.resume(args.name, at=utc_now(), by=by)
    state = "paused" if done.paused else "running"
    print(f"queue {done.name} {'is now' if done.changed else 'was already'} {state}")
    return 0


def _limit(args: argparse.Namespace, container: Container) -> int:
    limits = _services(container).limits
    if args.limit_command == "list":
        found = limits.overview(at=utc_now(), by=_cli_actor())
        for row in found.limits:
            rate = f"{row.rate}/{row.per_seconds:g}s" if row.rate and row.per_seconds else "-"
            print(
                f"{row.name}: concurrency {row.concurrency or '-'}, rate {rate};"
                f" in use {row.in_use}, waiting {row.waiting}"
            )
        for key in found.keys:
            print(
                f"  {key.queue} {key.kind} {key.key}: in use {key.in_use}"
                f" of {key.allowed or '-'}, waiting {key.waiting}"
            )
        return 0
    by = operator_of_store(args.by) if args.by else _cli_actor()
    if args.limit_command == "delete":
        limits.delete(args.name, at=utc_now(), by=by)
        print(f"limit {args.name} deleted")
        return 0
    values = LimitValuesIn(
        concurrency=args.concurrency, rate=args.rate, per_seconds=args.per_seconds
    )
    done = limits.set(args.name, values, at=utc_now(), by=by)
    print(f"limit {done.limit.name} {'set' if done.changed else 'unchanged'}")
    return 0


def _cli_actor() -> Actor:
    return operator_of_store(_operator())


def _rebuild_queue(container: Container, *, full: bool) -> int:
    admin = _services(container).admin
    bar = ProgressBar("rebuilding queue")
    report = admin.rebuild_queue(full=full, by=_cli_actor(), via="cli", progress=bar)
    bar.finish()
    print(
        f"queue rebuilt from the {report.source}: {report.items:,} open executions, "
        f"position {report.position:,}" + (f", {report.events:,} events" if report.events else "")
    )
    if report.quarantined:
        print(report.quarantined)
    return 0


def _rebuild_read_models(container: Container) -> int:
    bar = ProgressBar("rebuilding read models")
    started = time.monotonic()
    done = _services(container).admin.rebuild_read_models(by=_cli_actor(), progress=bar)
    bar.finish()
    took = time.monotonic() - started
    print(f"read models rebuilt: {done.events:,} events replayed in {took:.1f} s")
    if done.isolated:
        print(done.isolated)
    return 0


def _verify_queue(container: Container) -> int:
    differences, found = _services(container).admin.verify_queue(by=_cli_actor())
    for line in differences:
        print(line)
    for event in found.waiting:
        print(f"quarantined: {_describe_quarantined(event)}")
    for row, error in found.unrecorded:
        print(f"cannot be applied (not yet quarantined): position {row[0]} {row[3]}: {error}")
    for event in found.dropped:
        print(
            f"dropped by {event.dropped_by} ({event.dropped_reason}): position "
            f"{event.position} {event_type(event.topic)} of {event.originator_id}"
        )
    if differences:
        print(f"{len(differences)} difference(s) between the queue and the log")
    if found.faults:
        print(
            f"{found.faults} event(s) of the log are not in the queue: their executions "
            "stay out of it until `jobledger projections quarantine retry`"
        )
    if differences or found.faults:
        return 1
    print("the queue matches the log" + (" (but for dropped events)" if found.dropped else ""))
    return 0


def _describe_quarantined(event: QuarantinedEvent) -> str:
    return (
        f"#{event.id} {event.follower} position {event.position} "
        f"{event_type(event.topic)} of {event.originator_id} "
        f"v{event.originator_version} ({event.attempts} attempt(s), last "
        f"{event.last_seen:%Y-%m-%d %H:%M:%S}): {event.error}"
    )


def _quarantine(args: argparse.Namespace, container: Container) -> int:
    admin = _services(container).admin
    if args.quarantine_command == "list":
        events = admin.quarantined(by=_cli_actor())
        if args.json:
            print(msgspec.json.format(msgspec.json.encode(events)).decode())
            return 0
        for event in events:
            print(_describe_quarantined(event))
        print(f"{len(events)} quarantined event(s)")
        return 0
    if args.quarantine_command == "drop":
        return _drop_quarantined(args, container)
    if container.ping() == "memory":
        print(
            "jobledger: the embedded queue lives in the `jobledger dev` process; retry there "
            "with POST /api/v1/admin/quarantine/retry",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    return _print_retry(admin.retry_quarantined(None if args.all else args.ids, by=_cli_actor()))


def _drop_quarantined(args: argparse.Namespace, container: Container) -> int:
    admin, missing = _services(container).admin, 0
    by = operator_of_store(args.by)
    for event_id in args.ids:
        dropped = admin.drop_quarantined(event_id, by=by, reason=args.reason, at=utc_now())
        if not dropped:
            print(f"no quarantined event #{event_id}")
            missing += 1
        for event in dropped:
            print(f"dropped: {_describe_quarantined(event)}")
    return 1 if missing else 0


def _print_retry(report: RetryReport) -> int:
    for event in report.applied:
        print(f"applied: {_describe_quarantined(event)}")
    for event, error in report.failed:
        print(f"failed again: #{event.id} {event.follower} position {event.position}: {error}")
    for event in report.waiting:
        print(f"waiting: #{event.id} {event.follower} (an earlier event of its stream failed)")
    for missing in report.missing:
        print(f"no quarantined event #{missing}")
    print(
        f"{len(report.applied)} applied, {len(report.failed)} failed again, "
        f"{len(report.waiting)} waiting"
    )
    return 1 if report.failed or report.waiting or report.missing else 0


def _run_role(container: Container, role: str, with_projector: bool = False) -> int:  # noqa: FBT001, FBT002 (the flag as parsed)
    """Run ``role``'s parts (``runtime.roles``) until SIGINT or SIGTERM; stopped in
    reverse. Building the use cases gives the worker's system.archive handler its use
    case, and the scheduler its outbox relay."""
    parts = role_parts(
        container, role, PartOptions(_services(container)), with_projector=with_projector
    )
    with stop_on_signals() as stop:
        return run_parts(parts, stop)


def _run_api(container: Container, *, with_projector: bool) -> int:
    services = _services(container)
    password = services.accounts.ensure_admin(container.settings, at=utc_now())
    if password is not None:
        name = container.settings.admin_username
        print(f"jobledger: created the admin {name!r} with the dev password {password!r}")
    parts = role_parts(container, "api", PartOptions(services), with_projector=with_projector)
    with stop_on_signals() as stop:
        return run_parts(parts, stop)


def _preview(args: argparse.Namespace) -> int:
    schedule = CronSchedule(args.cron, args.tz)
    validate_schedule(schedule)
    if not 1 <= args.count <= MAX_PREVIEW:
        print(f"jobledger: --count must be 1 to {MAX_PREVIEW}", file=sys.stderr)
        return EXIT_USER_ERROR
    start = _parse_start(args.start)
    zone = ZoneInfo(args.tz)
    for fire in upcoming_fires(schedule, start, horizon=timedelta(days=3660), limit=args.count):
        local = fire.astimezone(zone)
        print(f"{local:%Y-%m-%d %H:%M %Z} ({local:%z})  {fire:%Y-%m-%d %H:%M} UTC")
    return 0


def _parse_start(text: str | None) -> datetime:
    return datetime.now(tz=UTC) if text is None else _parse_time("--from", text)


# ---- jobs: backfill ---------------------------------------------------------------------


def _add_job_commands(commands: "argparse._SubParsersAction[Any]") -> None:
    job = commands.add_parser("job", help="list, show, create, change and run jobs")
    job_commands = job.add_subparsers(dest="job_command", required=True, metavar="ACTION")
    job_cli.add_parsers(commands, job_commands)
    backfill = job_commands.add_parser(
        "backfill", help="fire the occurrences of a past window that never fired"
    )
    backfill.add_argument(
        "job", help="the job's id, or the key it was created with (or declared with in code)"
    )
    backfill.add_argument("--from", dest="start", required=True, help="ISO time with offset")
    backfill.add_argument("--to", dest="end", required=True, help="ISO time with offset")
    backfill.add_argument(
        "--overlap",
        choices=[mode.value for mode in BackfillOverlap],
        default=BackfillOverlap.ALLOW.value,
        help="allow (all at once), buffer_all (one after another), skip (one; the rest missed)",
    )
    backfill.add_argument("--max", type=int, default=1000, help="refuse if more would fire")
    backfill.add_argument("--reason", default="", help="why (recorded in the event)")
    backfill.add_argument("--by", help="who acts (recorded; default: this login)")
    backfill.add_argument("--dry-run", action="store_true", help="only count and list them")


def _backfill(args: argparse.Namespace, container: Container) -> int:
    jobs = _services(container).jobs
    report = jobs.backfill(
        jobs.job_id_of(args.job, field="JOB"),
        start=_parse_time("--from", args.start),
        end=_parse_time("--to", args.end),
        overlap=BackfillOverlap(args.overlap),
        limit=args.max,
        reason=args.reason,
        dry_run=args.dry_run,
        at=utc_now(),
        by=operator_of_store(args.by) if args.by else _cli_actor(),
    )
    print(
        f"{report.occurrences} occurrences in the window: {report.already_fired} already "
        f"fired, {report.excluded} excluded, {report.to_fire} to fire"
    )
    if args.dry_run:
        for occurrence in report.missing:
            print(f"  {occurrence.isoformat()}")
        if report.to_fire > len(report.missing):
            print(f"  ... and {report.to_fire - len(report.missing)} more")
        print("dry run: nothing fired")
        return 0
    print(f"fired {report.fired}, buffered {report.buffered}, skipped {report.skipped}")
    return 0


def _parse_time(flag: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SettingsError(
            f"{flag}: {text!r} is not an ISO time; use e.g. 2026-11-01T00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise SettingsError(f"{flag}: give a time zone, e.g. 2026-11-01T00:00-05:00 or ...Z")
    return check_instant(flag, moment)


# ---- retention: archive and audit -----------------------------------------------------


def _add_archive_commands(commands: "argparse._SubParsersAction[Any]") -> None:
    archive = commands.add_parser(
        "archive", help="move closed executions' history past the retention to archive files"
    )
    archive.add_argument(
        "--before", help="archive what closed before this ISO time (default: the retention)"
    )
    archive.add_argument(
        "--force",
        action="store_true",
        help="let --before go past the retention (needs --reason, recorded in the log)",
    )
    archive.add_argument("--reason", help="why --force archives runs younger than the retention")
    archive.add_argument("--dry-run", action="store_true", help="only count what would go")
    archive.add_argument(
        "--restore", type=Path, metavar="PATH", help="put an archive (file or folder) back"
    )
    audit = commands.add_parser("audit", help="print the events of an execution or an archive")
    audit.add_argument("--archive", type=Path, help="an archive file or folder to read")
    audit.add_argument("--execution", type=uuid.UUID, help="only this execution's events")


def _archive(args: argparse.Namespace, container: Container) -> int:
    if args.restore is not None:
        return _restore(args.restore, container)
    before = None if args.before is None else _parse_time("--before", args.before)
    at = utc_now()
    if before is not None and before > at:
        raise SettingsError("--before: give a time in the past, e.g. 2026-11-01T00:00Z")
    if args.reason is not None and not args.force:
        raise SettingsError("--reason: give it with --force, or leave it out")
    bar = ProgressBar("scanning the log")
    report = _services(container).archives.archive(
        at=at,
        by=_cli_actor(),
        before=before,
        forced_because=(args.reason or "") if args.force else None,
        dry_run=args.dry_run,
        progress=bar,
    )
    bar.finish()
    if report.held:
        print(
            "--before is later than the retention lets go: held to it; to archive younger"
            " runs, add --force --reason TEXT"
        )
    verb = "would archive" if report.dry_run else "archived"
    print(
        f"{verb} {report.executions:,} execution(s), {report.events:,} event(s) closed before "
        f"{report.cutoff:%Y-%m-%d %H:%M} UTC, in {len(report.batches)} archive(s) in "
        f"{report.location}"
    )
    print(f"low-water mark: position {report.mark.position:,} ({report.mark.follower})")
    return 0


def _restore(path: Path, container: Container) -> int:
    restored = _services(container).archives.restore(path, by=_cli_actor())
    for batch in restored:
        print(f"restored {batch.name}: {batch.executions:,} execution(s), {batch.events:,} events")
    print("run `jobledger projections rebuild` to list them in the API and the dashboard again")
    return 0


def _audit(args: argparse.Namespace, container: Container) -> int:
    archives = _services(container)
    if args.archive is not None:
        events = archives.archives.audit(args.archive, args.execution)
    elif args.execution is not None:
        events = iter(archives.executions.history(args.execution))
    else:
        raise SettingsError("audit: give --execution ID, --archive PATH, or both")
    for event in events:
        print(msgspec.json.encode(event).decode())
    return 0


def _print_json(value: dict[str, Any]) -> int:
    print(json.dumps(value, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
