"""The `jobledger` command."""

import argparse
import asyncio
import getpass
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import redis
import structlog

from jobledger.domain.errors import DomainError
from jobledger.domain.json_values import check_reason
from jobledger.domain.schedules import (
    CronSchedule,
    check_instant,
    upcoming_fires,
    validate_schedule,
)
from jobledger.projections.quarantine import (
    QuarantinedEvent,
    RetryReport,
    RetryStoppedError,
    event_type,
)
from jobledger.runtime.bootstrap import Container, bootstrap
from jobledger.runtime.dead_letters import (
    DeadLetterFilter,
    attempt_history,
    dead_letters,
    discard_dead_letters,
    requeue_dead_letters,
)
from jobledger.runtime.demo import seed_demo_jobs
from jobledger.runtime.errors import RuntimeLayerError, SettingsError
from jobledger.runtime.logging import configure_logging
from jobledger.runtime.outages import OutageProbe
from jobledger.runtime.progress import ProgressBar
from jobledger.runtime.scheduler import SchedulerService
from jobledger.runtime.settings import PREFIX, Settings, load_settings, mask_url
from jobledger.runtime.store import check_migrated, migrate

log = structlog.get_logger(__name__)

EXIT_USER_ERROR = 2
MAX_PREVIEW = 1000


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
    _add_projection_commands(commands)
    return parser


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
    if command == "migrate":
        migrate(settings)
        return 0
    if command == "config":
        return _print_json(settings.masked())
    if command == "schedule":
        return _preview(args)
    if command == "dev":
        return _run_dev(args, settings)
    if command == "queue" and not settings.redis_url:
        _refuse_embedded_queue(args.queue_command)
    with bootstrap(settings, role=command) as container:
        if command in _ROLES:
            _preflight(container)
        return _run_with(args, container)


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


def _preflight(container: Container) -> None:
    """Fail now, in one line, on what would otherwise fail later: a store that misses a
    migration, an unreachable Redis, a handler module that does not import."""
    check_migrated(container.settings)
    container.ping()
    container.handlers()
    # From here on a store that goes away is an outage to ride out, not a reason to exit.
    container.health.expect(*container.dependencies())


def _run_with(args: argparse.Namespace, container: Container) -> int:
    """The commands that need the wired objects of a running jobledger."""
    runners: dict[str, Callable[[], int]] = {
        "status": lambda: _print_json(container.ledger.describe()),
        "projector": lambda: _run_projector(container),
        "api": lambda: _run_api(container, with_projector=args.with_projector),
        "scheduler": lambda: _run_scheduler(container, with_projector=args.with_projector),
        "worker": lambda: _run_worker(container, with_projector=args.with_projector),
        "dlq": lambda: _dead_letters(args, container),
        "queue": lambda: (
            _rebuild_queue(container, full=args.full)
            if args.queue_command == "rebuild"
            else _verify_queue(container)
        ),
        "projections": lambda: (
            _rebuild_read_models(container)
            if args.projections_command == "rebuild"
            else _quarantine(args, container)
        ),
        "seed": lambda: _seed(container),
    }
    return runners[args.command]()


def _run_dev(args: argparse.Namespace, settings: Settings) -> int:
    # The web stack is imported only by the commands that serve it: it would add about
    # 10 MB and a second of start-up to every scheduler, worker and projector.
    from jobledger.api.devserver import DevOptions, run_dev  # noqa: PLC0415

    migrate(settings)
    with bootstrap(settings, role="dev") as container:
        _preflight(container)
        run_dev(container, _say, DevOptions(demo=not args.no_demo))
    return 0


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
    results = seed_demo_jobs(container.ledger, at=datetime.now(tz=UTC), by="jobledger seed")
    for result in results:
        reason = f": {result.reason}" if result.reason else ""
        print(f"{result.outcome} {result.name!r} ({result.job_id}){reason}")
    return 0


def _dead_letters(args: argparse.Namespace, container: Container) -> int:
    if args.dlq_command in {"requeue", "discard"}:
        # Checked once here: per execution, a refusal would only count as "refused".
        check_reason(args.by, args.reason)
    if args.dlq_command == "show":
        for entry in attempt_history(container.ledger, args.execution_id):
            print(json.dumps(entry, default=str, sort_keys=True))
        return 0
    # The queue lists dead letters; make sure it has every event of the log first.
    projection = container.projector().queue
    while projection.step():
        pass
    selection = DeadLetterFilter(queue=args.queue, handler=args.handler)
    items = list(dead_letters(container.queue, selection))
    if args.dlq_command == "list":
        for item in items:
            died = f"{item.at:%Y-%m-%d %H:%M:%S}"
            print(f"{item.execution_id}  {item.queue}  attempts {item.attempt}  {died}")
        print(f"{len(items)} dead letter(s)")
        return 0
    ids = [i.execution_id for i in items]
    if args.ids:
        wanted = set(args.ids)
        ids = [i for i in ids if i in wanted]
    options: dict[str, Any] = {
        "by": args.by,
        "reason": args.reason,
        "error_contains": args.error_contains,
        "dry_run": args.dry_run,
    }
    ledger, writer = container.ledger, container.writer
    if args.dlq_command == "requeue":
        report = requeue_dead_letters(ledger, writer, ids, at=datetime.now(tz=UTC), **options)
    else:
        report = discard_dead_letters(ledger, writer, ids, **options)
    verb = f"would {args.dlq_command}" if report.dry_run else args.dlq_command.rstrip("e") + "ed"
    done = report.matched if report.dry_run else report.changed
    print(f"{verb} {done} of {report.matched} matching dead letter(s); {report.refused} refused")
    return 0


def _rebuild_queue(container: Container, *, full: bool) -> int:
    projector = container.projector()
    by = _operator()
    log.info("queue.rebuild_requested", requested_by=by, full=full, via="cli")
    bar = ProgressBar("rebuilding queue")
    try:
        report = projector.queue.rebuild(full=full, progress=bar, requested_by=by)
    finally:
        projector.close()
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
    models = container.read_models()
    events = models.rebuild(progress=bar)
    bar.finish()
    print(f"read models rebuilt: {events:,} events replayed in {time.monotonic() - started:.1f} s")
    if summary := models.isolation.summary():
        print(summary)
    return 0


def _verify_queue(container: Container) -> int:
    differences, found = container.verify_queue()
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
    if args.quarantine_command == "list":
        events = container.quarantine().events()
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
    try:
        report = container.retry_quarantined(None if args.all else args.ids)
    except RetryStoppedError as error:
        print(f"jobledger: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    return _print_retry(report)


def _drop_quarantined(args: argparse.Namespace, container: Container) -> int:
    quarantine, missing = container.quarantine(), 0
    for event_id in args.ids:
        dropped = quarantine.drop(event_id, by=args.by, reason=args.reason, at=datetime.now(tz=UTC))
        if not dropped:
            print(f"no quarantined event #{event_id}")
            missing += 1
        for event in dropped:
            log.warning(
                "projection.quarantine_dropped",
                id=event.id,
                follower=event.follower,
                position=event.position,
                originator_id=event.originator_id,
                by=args.by,
                reason=args.reason,
            )
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


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _run_projector(container: Container) -> int:
    stop = _stop_on_signals()
    if container.settings.metrics_port:
        container.metrics.serve(container.settings.metrics_port, container.settings.metrics_host)
    projector = container.projector()
    projector.start()
    stop.wait()
    projector.stop()
    return 0


def _run_api(container: Container, *, with_projector: bool) -> int:
    from jobledger.api.server import ensure_admin, serve  # noqa: PLC0415 (as in _run_dev)

    password = ensure_admin(container)
    if password is not None:
        name = container.settings.admin_username
        print(f"jobledger: created the admin {name!r} with the dev password {password!r}")
    projector = container.projector() if with_projector else None
    if projector is not None:
        projector.start()
    # Requests report outages as they meet them; the probe sees them end.
    probe = OutageProbe(container.health, dict(container.probes().values()))
    probe.start()
    try:
        serve(container)
    finally:
        probe.stop()
        if projector is not None:
            projector.stop()
    return 0


def _run_scheduler(container: Container, *, with_projector: bool) -> int:
    stop = _stop_on_signals()
    if container.settings.metrics_port:
        container.metrics.serve(container.settings.metrics_port, container.settings.metrics_host)
    projector = container.projector() if with_projector else None
    if projector is not None:
        projector.start()
    SchedulerService(container.scheduler(), health=container.health).run_until(stop)
    if projector is not None:
        projector.stop()
    return 0


def _run_worker(container: Container, *, with_projector: bool) -> int:
    if container.settings.metrics_port:
        container.metrics.serve(container.settings.metrics_port, container.settings.metrics_host)
    projector = container.projector() if with_projector else None
    if projector is not None:
        projector.start()
    asyncio.run(_work(container))
    if projector is not None:
        projector.stop()
    return 0


async def _work(container: Container) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await container.worker().run(stop)


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
    if text is None:
        return datetime.now(tz=UTC)
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        raise SettingsError(
            f"--from: {text!r} is not an ISO time; use e.g. 2026-03-07T00:00Z"
        ) from None
    if start.tzinfo is None:
        raise SettingsError("--from: give a time zone, e.g. 2026-03-07T00:00-05:00 or ...Z")
    return check_instant("--from", start)


def _print_json(value: dict[str, Any]) -> int:
    print(json.dumps(value, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
