"""``jobledger job list|show|create|update|trigger|pause|resume|delete`` and
``jobledger run``: jobs and runs through a running jobledger's API, with the Python
client (``JOBLEDGER_URL``, ``JOBLEDGER_TOKEN``), as ``jobledger apply`` does. The API
checks the token's role and records its user in every event a command writes.

Input is checked here before anything is sent: a bad flag or file is one line naming
the flag (or the file's field) and the fix, exit status 2, nothing written. So is a
request the API refuses."""

import argparse
import json
import math
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from jobledger.client import (
    Client,
    ConnectionFailedError,
    ExecutionCancelledError,
    ExecutionFailedError,
    JobledgerError,
    WaitTimedOutError,
)
from jobledger.domain.job import job_reference
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.schemas.jobs import JobIn, JobOut, JobPatch, RetryIn, ScheduleIn
from jobledger.schemas.rows import JobRow

EXIT_REFUSED = 2
EXIT_RUN_FAILED = 1
# The `job` actions that go through the API (`job backfill` works on the store).
CLIENT_ACTIONS = frozenset(
    {"list", "show", "create", "update", "trigger", "pause", "resume", "delete"}
)
Say = Callable[[str], None]
_Body = TypeVar("_Body", JobIn, JobPatch)

# The definition's fields as flags: the field (a dotted path) each flag sets.
_FLAGS = {
    "name": "--name",
    "handler": "--handler",
    "payload": "--payload",
    "queue": "--queue",
    "priority": "--priority",
    "timeout_seconds": "--timeout",
    "description": "--description",
    "misfire": "--misfire",
    "overlap": "--overlap",
    "retry.max_retries": "--max-retries",
    "schedule.cron": "--cron",
    "schedule.every_seconds": "--every",
    "schedule.offset_seconds": "--offset",
    "schedule.run_at": "--at",
    "schedule.timezone": "--timezone",
    "schedule": "--cron/--every/--at/--manual",
}


class InputError(Exception):
    """A flag or file this command refuses before sending anything."""


# ---- the parsers ----------------------------------------------------------------------


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the API (default $JOBLEDGER_URL, else 127.0.0.1:8000)")
    parser.add_argument("--token", help="an API token (default $JOBLEDGER_TOKEN)")
    parser.add_argument(
        "--output", choices=("table", "json"), default="table", help="how to print (table)"
    )


def _job_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's id, or the key it was created with")


def _definition_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", type=Path, help="the definition as JSON or TOML (flags override its fields)"
    )
    parser.add_argument("--name", help="the job's name")
    parser.add_argument("--handler", help="the handler it runs, e.g. test.echo")
    parser.add_argument("--payload", help='the payload, a JSON object: \'{"to": "ops"}\'')
    parser.add_argument("--queue", help="the queue its runs go to (default: default)")
    parser.add_argument("--priority", type=int, help="0 (lowest) to 9 (default 5)")
    parser.add_argument("--timeout", type=float, help="seconds an attempt may run (300)")
    parser.add_argument("--max-retries", type=int, help="attempts after the first (3)")
    parser.add_argument("--description", help="what the job is for")
    parser.add_argument("--misfire", choices=[p.value for p in MisfirePolicy])
    parser.add_argument("--overlap", choices=[p.value for p in OverlapPolicy])
    when = parser.add_argument_group("schedule (one of)")
    when.add_argument("--cron", help='a 5-field cron, e.g. "30 2 * * *"')
    when.add_argument("--every", type=int, help="an interval, in seconds")
    when.add_argument("--at", help="once, at this ISO time with an offset")
    when.add_argument("--manual", action="store_true", help="only when triggered")
    when.add_argument("--timezone", help="the IANA zone of --cron or --every (UTC)")
    when.add_argument("--offset", type=int, help="seconds past each --every multiple (0)")


def add_parsers(
    commands: "argparse._SubParsersAction[Any]", job_actions: "argparse._SubParsersAction[Any]"
) -> None:
    """The `job` actions beside `job backfill`, and `run`."""
    listing = job_actions.add_parser("list", help="list jobs, by name")
    listing.add_argument("--status", choices=("active", "paused", "deleted"))
    listing.add_argument("--handler", help="only jobs of this handler")
    listing.add_argument("--queue", help="only jobs of this queue")
    listing.add_argument("--search", help="only names that contain this, any case")
    listing.add_argument("--source", choices=("api", "code"), help="code: `apply` manages it")
    show = job_actions.add_parser("show", help="one job, as GET /api/v1/jobs/{id} answers")
    create = job_actions.add_parser("create", help="create a job from flags or a file")
    _definition_flags(create)
    create.add_argument("--key", help="an idempotency key: the same key creates one job")
    update = job_actions.add_parser("update", help="change the fields given; the rest stay")
    _definition_flags(update)
    trigger = job_actions.add_parser("trigger", help="run a job now, outside its schedule")
    trigger.add_argument("--key", help="an idempotency key: the same key runs once")
    pause = job_actions.add_parser("pause", help="stop a job firing (runs already out finish)")
    pause.add_argument("--reason", default="", help="why (recorded in the event)")
    resume = job_actions.add_parser("resume", help="fire a paused job again, from now on")
    delete = job_actions.add_parser("delete", help="delete a job: it stops; its history stays")
    for parser in (update, delete):
        parser.add_argument(
            "--override", action="store_true", help="change a job `jobledger apply` manages"
        )
    for parser in (show, update, trigger, pause, resume, delete):
        _job_argument(parser)
    for parser in (listing, show, create, update, trigger, pause, resume, delete):
        _connection(parser)
    run = commands.add_parser("run", help="run a handler once, now (through the API)")
    run.add_argument("handler", metavar="HANDLER", help="the handler, e.g. test.echo")
    run.add_argument("--payload", help="its payload, a JSON object")
    run.add_argument("--queue", default="default", help="the queue (default: default)")
    run.add_argument("--priority", type=int, default=5, help="0 (lowest) to 9 (default 5)")
    run.add_argument("--key", help="an idempotency key: the same key runs once")
    run.add_argument("--wait", action="store_true", help="wait for the run and print its result")
    run.add_argument("--wait-timeout", type=float, help="give up waiting after this many seconds")
    _connection(run)


# ---- running them ---------------------------------------------------------------------


def run(args: argparse.Namespace, say: Say = print) -> int:
    """One job or run command: 0 when done, 2 when the input or the API refused it,
    1 when an awaited run failed."""
    name = _name(args)
    try:
        with Client(args.url, args.token) as client:
            if args.command == "run":
                return _run_handler(args, client, say)
            return _job_action(args, client, say)
    except InputError as error:
        print(f"jobledger {name}: {error}", file=sys.stderr)
    except (ExecutionFailedError, ExecutionCancelledError, WaitTimedOutError) as error:
        print(f"jobledger {name}: {error}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except ConnectionFailedError as error:  # the client's message names the URL and the fix
        print(f"jobledger {name}: cannot reach the API: {error}", file=sys.stderr)
    except JobledgerError as error:
        flag = _FLAGS.get(error.field or "", error.field)
        where = f" ({flag})" if flag else ""
        print(f"jobledger {name}: refused{where}: {error}", file=sys.stderr)
    return EXIT_REFUSED


def _warn(args: argparse.Namespace, warnings: list[str]) -> None:
    """What the API warned of (a queue no worker serves), on stderr: before a --wait
    that would otherwise wait without a word."""
    for warning in warnings:
        print(f"jobledger {_name(args)}: warning: {warning}", file=sys.stderr)


def _name(args: argparse.Namespace) -> str:
    return "run" if args.command == "run" else f"job {args.job_command}"


def _job_action(args: argparse.Namespace, client: Client, say: Say) -> int:
    action: str = args.job_command
    if action == "list":
        filters = {k: getattr(args, k) for k in ("status", "handler", "queue", "search", "source")}
        rows = list(client.iter_jobs(**{k: v for k, v in filters.items() if v is not None}))
        _print_rows(rows, args.output, say)
        return 0
    if action == "create":
        body = _creation(args)
        _print_job(client.create_job(body, idempotency_key=args.key), args.output, say)
        return 0
    job_id = job_reference(args.job)
    if action == "trigger":
        ref = client.trigger_job(job_id, idempotency_key=args.key)
        _warn(args, ref.warnings)
        if args.output == "json":
            say(_json(ref))
        else:
            say(f"triggered {job_id}: run {ref.id} ({ref.status})")
        return 0
    doers: dict[str, Callable[[], JobOut]] = {
        "show": lambda: client.get_job(job_id),
        "update": lambda: client.update_job(
            job_id,
            _patch(args, lambda: client.get_job(job_id).definition.retry),
            override=args.override,
        ),
        "pause": lambda: client.pause_job(job_id, reason=args.reason),
        "resume": lambda: client.resume_job(job_id),
        "delete": lambda: client.delete_job(job_id, override=args.override),
    }
    _print_job(doers[action](), args.output, say)
    return 0


def _run_handler(args: argparse.Namespace, client: Client, say: Say) -> int:
    payload = _payload(args.payload) if args.payload is not None else {}
    ref = client.enqueue(
        args.handler,
        payload,
        queue=args.queue,
        priority=args.priority,
        idempotency_key=args.key,
    )
    _warn(args, ref.warnings)
    if not args.wait:
        say(_json(ref) if args.output == "json" else f"run {ref.id} ({ref.status})")
        return 0
    result = client.wait(ref.id, timeout=args.wait_timeout)
    if args.output == "json":
        say(_json({"id": ref.id, "status": "completed", "result": result}))
    else:
        say(f"run {ref.id} completed")
        say(f"result: {json.dumps(result, sort_keys=True, default=str)}")
    return 0


# ---- definitions from flags and files --------------------------------------------------


def _creation(args: argparse.Namespace) -> JobIn:
    fields = _file(args.file) if args.file is not None else {}
    fields = _merged(fields, _flag_fields(args), fields.get("retry"))
    for field in ("name", "handler"):
        if field not in fields:
            raise InputError(
                f"{_FLAGS[field]} is required; give it, or a --file whose {field} is set"
            )
    return _converted(fields, JobIn, args.file)


def _patch(args: argparse.Namespace, retry: Callable[[], RetryIn]) -> JobPatch:
    """The fields to change; ``retry``: the job's retry policy now, which a PATCH's
    ``retry`` replaces whole, so --max-retries alone keeps its back-off."""
    fields = _file(args.file) if args.file is not None else {}
    if args.max_retries is not None and "retry" not in fields:
        fields["retry"] = msgspec.to_builtins(retry())
    fields = _merged(fields, _flag_fields(args), fields.get("retry"))
    if not fields:
        raise InputError("nothing to change; give a flag such as --cron or --payload, or --file")
    return _converted(fields, JobPatch, args.file)


def _merged(fields: dict[str, Any], flags: dict[str, Any], retry: object) -> dict[str, Any]:
    """The flags over the file's fields: a schedule flag replaces the whole schedule,
    --max-retries only the count of the file's (or the job's) retry policy."""
    merged = fields | flags
    if "retry" in flags and isinstance(retry, dict):
        merged["retry"] = retry | flags["retry"]
    return merged


def _flag_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for field in ("name", "handler", "queue", "priority", "description", "misfire", "overlap"):
        if getattr(args, field) is not None:
            fields[field] = getattr(args, field)
    if args.payload is not None:
        fields["payload"] = _payload(args.payload)
    if args.timeout is not None:
        fields["timeout_seconds"] = args.timeout
    if args.max_retries is not None:
        fields["retry"] = {"max_retries": args.max_retries}
    schedule = _schedule(args)
    if schedule is not None:
        fields["schedule"] = schedule
    return fields


def _schedule(args: argparse.Namespace) -> dict[str, Any] | None:
    given = [
        flag
        for flag, value in (
            ("--cron", args.cron),
            ("--every", args.every),
            ("--at", args.at),
            ("--manual", args.manual or None),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)}: give one schedule, not {len(given)}")
    zone = {} if args.timezone is None else {"timezone": args.timezone}
    if args.timezone is not None and given not in (["--cron"], ["--every"]):
        raise InputError("--timezone: goes with --cron or --every; add one of them")
    if args.offset is not None and given != ["--every"]:
        raise InputError("--offset: goes with --every; add --every SECONDS")
    if args.cron is not None:
        return {"kind": "cron", "cron": args.cron, **zone}
    if args.every is not None:
        offset = {} if args.offset is None else {"offset_seconds": args.offset}
        return {"kind": "interval", "every_seconds": args.every, **offset, **zone}
    if args.at is not None:
        return {"kind": "once", "run_at": args.at}
    return {"kind": "manual"} if args.manual else None


def _finite(value: object, path: str) -> None:
    """Refuse a number no double holds (``1e400``, ``NaN``): JSON has no such number,
    and it would be sent as null."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{path}: {value} is no finite number; send a finite one")
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        _finite(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]")


def _payload(text: str) -> dict[str, Any]:
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(
            f"--payload: not JSON ({error.msg} at character {error.pos}); "
            'give a JSON object, e.g. \'{"to": "ops"}\''
        ) from None
    if not isinstance(payload, dict):
        raise InputError(
            f"--payload: a JSON {type(payload).__name__} is no object; "
            'give a JSON object, e.g. \'{"to": "ops"}\''
        )
    _finite(payload, "--payload")
    return payload


def _file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"--file: cannot read {path}: {error.strerror}") from None
    try:
        if path.suffix == ".toml":
            fields: object = tomllib.loads(text)
        elif path.suffix == ".json":
            fields = json.loads(text)
        else:
            raise InputError(f"--file: {path} is neither .json nor .toml; name it so")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"--file: {path} does not parse ({error}); fix its syntax") from None
    if not isinstance(fields, dict):
        raise InputError(f"--file: {path} holds no object of a job's fields; write one")
    _finite(fields, f"--file {path}")
    return fields


def _converted(fields: Mapping[str, Any], kind: type[_Body], file: Path | None) -> _Body:
    """``fields`` as the API's body, or a refusal naming the flag (or the file's field)."""
    try:
        return msgspec.convert(fields, kind)
    except msgspec.ValidationError as error:
        problem, _, path = str(error).partition(" - at `$.")
        field = path.rstrip("`") or _missing(problem)
        flag = _FLAGS.get(field.split("[")[0])
        where = flag if flag is not None else f"{file or 'the definition'}: {field}"
        raise InputError(f"{where}: {problem}; see `jobledger job create --help`") from None


def _missing(problem: str) -> str:
    """The field of msgspec's "Object missing required field `x`" (else "")."""
    _, _, rest = problem.partition("`")
    return rest.rstrip("`")


# ---- output ---------------------------------------------------------------------------


def _json(value: object) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def schedule_words(schedule: ScheduleIn | None) -> str:
    """A schedule in one short line, for a table."""
    shown: dict[str, Any] = msgspec.to_builtins(schedule) if schedule is not None else {}
    kind = shown.get("kind", "?")
    if kind == "cron":
        return f"cron {shown['cron']} {shown['timezone']}"
    if kind == "interval":
        offset = f"+{shown['offset_seconds']}s" if shown["offset_seconds"] else ""
        return f"every {shown['every_seconds']}s{offset} {shown['timezone']}"
    if kind == "once":
        return f"once {shown['run_at']}"
    return str(kind)


def _print_rows(rows: list[JobRow], output: str, say: Say) -> None:
    if output == "json":
        say(_json(rows))
        return
    table = [("ID", "NAME", "STATUS", "SCHEDULE", "HANDLER", "QUEUE", "NEXT FIRE")]
    table += [
        (
            str(row.id),
            row.name,
            row.status,
            schedule_words(row.schedule),
            row.handler,
            row.queue,
            row.next_fire_at.isoformat() if row.next_fire_at else "-",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        say("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def _print_job(job: JobOut, output: str, say: Say) -> None:
    if output == "json":
        say(_json(job))
        return
    definition = job.definition
    lines = {
        "id": str(job.id),
        "name": definition.name,
        "status": f"{job.status} (version {job.version})",
        "schedule": schedule_words(definition.schedule),
        "handler": definition.handler,
        "payload": json.dumps(definition.payload, sort_keys=True),
        "queue": f"{definition.queue} (priority {definition.priority})",
        "timeout": f"{definition.timeout_seconds:g} s",
        "next fire": job.next_fire_at.isoformat() if job.next_fire_at else "-",
        "source": job.source + (f" ({job.key})" if job.key else ""),
    }
    for label, value in lines.items():
        say(f"{label + ':':<11}{value}")
