"""What the pages show, computed from the API's state: cards, timelines, form choices."""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any
from uuid import UUID

import msgspec
from markupsafe import Markup, escape

from jobledger.domain.limits import RunLimits
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.schedules import region_zones
from jobledger.schemas.handlers import HandlerOut
from jobledger.schemas.notifications import NotificationRuleOut
from jobledger.schemas.rows import StepCounts
from jobledger.services.history import EventOut
from jobledger.services.system import SystemView

# A job that fires every minute has tens of thousands of events in a month; the page
# shows the newest ones and says how many it left out.
TIMELINE_LIMIT = 200
_SUMMARY_CHARS = 160
# Fields that the timeline shows elsewhere (who, the execution link) or that say
# nothing to a person (idempotency keys).
_QUIET = frozenset(
    {"by", "via", "definition", "spec", "result", "execution_id", "key", "trigger_key"}
)


@dataclass(frozen=True)
class Card:
    key: str
    label: str
    value: str
    detail: str
    href: str | None = None
    alert: bool = False


def cards(view: SystemView) -> list[Card]:
    jobs = view.counts.get("jobs", {})
    executions = view.counts.get("executions", {})
    ready = sum(q.depths.ready for q in view.queues)
    delayed = sum(q.depths.delayed for q in view.queues)
    dead = executions.get("dead_lettered", 0)
    lag = view.projection_lag
    return [
        Card(
            "jobs",
            "Jobs",
            str(jobs.get("active", 0) + jobs.get("paused", 0)),
            f"{jobs.get('active', 0)} active, {jobs.get('paused', 0)} paused",
            "/ui/jobs",
        ),
        Card(
            "running",
            "Running",
            str(executions.get("running", 0)),
            f"{view.slots_in_use} slots in use",
            "/ui/executions?status=running",
        ),
        Card(
            "queued",
            "Queued",
            str(ready),
            f"ready, {_count(len(view.queues), 'queue')}",
            "/ui/system",
        ),
        Card("delayed", "Delayed", str(delayed), "waiting for their time or a retry", "/ui/system"),
        Card("dead", "Dead-lettered", str(dead), "wait for an operator", "/ui/dlq", alert=dead > 0),
        Card("workers", "Workers", str(view.workers), "live now", "/ui/workers"),
        Card("leader", "Leader", view.leader or "none", f"epoch {view.leader_epoch}", "/ui/system"),
        Card(
            "lag",
            "Projection lag",
            str(max(lag.values(), default=0)),
            ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in sorted(lag.items())),
            "/ui/system",
            alert=max(lag.values(), default=0) > 1000,  # noqa: PLR2004 (a visible backlog)
        ),
    ]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


# ---- event timelines -----------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    event: EventOut
    cause: str
    summary: str
    execution_id: str | None


# What fired an occurrence that was not the schedule's own (JobFired.trigger).
_FIRED_BY = {
    "backfill": "backfill",
    "dependency": "upstream runs (leader epoch {leader_epoch})",
}


def cause_of(event: EventOut) -> str:
    """Who or what made the event happen."""
    data = event.data
    if data.get("by"):
        return f"{data['by']} via {data['via']}" if data.get("via") else str(data["by"])
    if "leader_epoch" in data:
        fired_by = _FIRED_BY.get(data.get("trigger", ""), "scheduler (leader epoch {leader_epoch})")
        return fired_by.format(**data)
    if data.get("worker_id"):
        return f"worker {data['worker_id']}"
    if event.type in {"JobFiresMissed", "ExecutionLeaseExpired"}:
        return "scheduler"
    if event.type == "ExecutionEnqueued":
        return f"{data.get('trigger', 'system')} trigger"
    return "worker" if event.type.startswith("Execution") else "system"


def _short(value: Any) -> str:  # noqa: ANN401 (any event field)
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _differences(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> list[str]:
    """Dotted names of the fields that differ, one level into nested objects."""
    names: list[str] = []
    for key in sorted(after.keys() | before.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if not prefix and isinstance(old, dict) and isinstance(new, dict):
            names.extend(_differences(old, new, f"{key}."))
        else:
            names.append(prefix + key)
    return names


def _changed(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    if before is None:
        return ""
    return "changed: " + (", ".join(_differences(before, after)) or "nothing")


def summary_of(event: EventOut, previous: Mapping[str, Any] | None) -> str:
    if event.undecodable:
        return f"cannot be decoded: {event.error}"
    data = event.data
    if event.type == "ExecutionThrottled":
        return f"waited for the {data.get('kind', '')} limit {data.get('limit', '')}"
    parts = [_changed(previous, data["definition"])] if "definition" in data else []
    parts += [
        f"{k.replace('_', ' ')}: {_short(v)}"
        for k, v in data.items()
        if k not in _QUIET and v is not None
    ]
    if isinstance(data.get("result"), dict):
        parts.append(f"result: {_short(data['result'])}")
    return "; ".join(p for p in parts if p)


def timeline(events: Sequence[EventOut]) -> list[Entry]:
    """The newest ``TIMELINE_LIMIT`` events first, each with its cause and summary."""
    entries: list[Entry] = []
    definition: Mapping[str, Any] | None = None
    for event in events:
        entries.append(
            Entry(event, cause_of(event), summary_of(event, definition), _execution(event))
        )
        definition = event.data.get("definition", definition)
    return entries[::-1][:TIMELINE_LIMIT]


def _execution(event: EventOut) -> str | None:
    value = event.data.get("execution_id")
    return str(value) if value else None


def run_limits(limits: RunLimits | None) -> str:
    """What a run waits for, as its spec keeps it (keys resolved): without values of its
    own, the named limit of the key decides."""
    if limits is None:
        return ""
    parts = []
    if limits.concurrency is not None:
        at_most = limits.concurrency.max
        values = "the named limit's" if at_most is None else f"at most {at_most} at once"
        parts.append(f"concurrency {limits.concurrency.key} ({values})")
    if limits.rate is not None:
        rate, per = limits.rate.limit, limits.rate.per
        values = (
            "the named limit's"
            if rate is None or per is None
            else (f"{rate} starts per {per.total_seconds():g} s")
        )
        parts.append(f"rate {limits.rate.key} ({values})")
    return "; ".join(parts)


def versions(events: Sequence[EventOut]) -> list[dict[str, Any]]:
    """The job's versions for the history slider: number, time and what made it."""
    return [
        {
            "version": e.version,
            "at": e.timestamp.isoformat() if e.timestamp else "",
            "type": e.type,
            "by": cause_of(e),
        }
        for e in events
    ]


# ---- forms ---------------------------------------------------------------------------


@cache
def timezones() -> tuple[str, ...]:
    return tuple(sorted(region_zones()))


def payload_hints(handlers: Iterable[HandlerOut]) -> dict[str, str]:
    """A line per handler that declares its payload: its fields, their types, which are
    required, and the defaults ("customer: string, required; currency: string = EUR")."""
    return {
        handler.name: _fields_text(handler.payload_schema)
        for handler in handlers
        if handler.payload_schema is not None
    }


def _fields_text(schema: dict[str, Any]) -> str:
    reference = str(schema.get("$ref", ""))
    if reference.startswith("#/$defs/"):
        schema = schema.get("$defs", {}).get(reference.removeprefix("#/$defs/"), schema)
    required = set(schema.get("required", ()))
    parts = []
    for name, field in schema.get("properties", {}).items():
        kind = field.get("type") or ("object" if "$ref" in field else "any")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        if name in required:
            parts.append(f"{name}: {kind}, required")
        elif "default" in field:
            parts.append(f"{name}: {kind} = {json.dumps(field['default'])}")
        else:
            parts.append(f"{name}: {kind}")
    return "; ".join(parts) or "an object"


def form_choices(handlers: Iterable[str]) -> dict[str, Any]:
    return {
        "handlers": sorted(handlers),
        "timezones": timezones(),
        "misfires": [p.value for p in MisfirePolicy],
        "overlaps": [p.value for p in OverlapPolicy],
    }


def parse_time(text: str | None) -> datetime | None:
    """A filter time from a form: ISO 8601, read as UTC when it has no offset.
    Raises ValueError for anything else."""
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_uuid(text: str | None) -> UUID | None:
    return UUID(text.strip()) if text and text.strip() else None


# ---- notification rules ----------------------------------------------------------------


def rule_filters(rule: NotificationRuleOut) -> str:
    """The filters a rule's runs must match, in a few words ("job nightly, queue
    reports"); "any" when it has none."""
    given = {
        "job": rule.job,
        "queue": rule.queue,
        "handler": rule.handler,
        "workflow": rule.workflow,
    }
    return ", ".join(f"{name} {value}" for name, value in given.items() if value) or "any"


def rule_thresholds(rule: NotificationRuleOut) -> str:
    """When a rule tells, and how often at most: "3 in a row; cooldown 600 s"."""
    parts = []
    if rule.count is not None:
        in_a_row = rule.on == "failures_in_a_row"
        parts.append(f"{rule.count} in a row" if in_a_row else f"more than {rule.count} due")
    if rule.older_than_seconds is not None:
        parts.append(f"due over {rule.older_than_seconds:g} s")
    cooldown = rule.cooldown_seconds
    parts.append(f"cooldown {cooldown:g} s" if cooldown else "no cooldown")
    return "; ".join(parts)


# ---- template filters ----------------------------------------------------------------


def when(moment: datetime | None) -> Markup:
    if moment is None:
        return Markup("—")
    moment = moment.astimezone(UTC)
    return Markup('<time datetime="{}">{}</time>').format(
        moment.isoformat(), f"{moment:%Y-%m-%d %H:%M:%S} UTC"
    )


def stamp(moment: datetime | None) -> str:
    """A time as plain text in the one format (for an attribute, where ``when``'s
    element cannot go)."""
    return "—" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


# The states a list row names beside the completed steps, in the order it names them.
_OTHER_STEPS = ("released", "waiting", "failed", "cancelled", "skipped")


def step_counts(counts: StepCounts) -> str:
    """A workflow's steps by state in a few words: "1 of 4 completed; 1 failed, 2
    skipped" (a state no step is in is left out)."""
    done = f"{counts.completed} of {counts.total} completed"
    others = [f"{n} {state}" for state in _OTHER_STEPS if (n := getattr(counts, state))]
    return f"{done}; {', '.join(others)}" if others else done


def duration(milliseconds: float | None) -> str:
    if milliseconds is None:
        return "—"
    if milliseconds < 1000:  # noqa: PLR2004 (a second)
        return f"{milliseconds:.0f} ms"
    return f"{milliseconds / 1000:.2f} s"


def ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:  # noqa: PLR2004 (two minutes)
        return f"{seconds} s ago"
    return f"{seconds // 60} min ago"


def as_json(value: Any) -> str:  # noqa: ANN401 (any JSON value)
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def schedule_text(shown: Mapping[str, Any] | msgspec.Struct | None) -> Markup:
    """A schedule in words: from a definition's ``schedule``, or a job row's."""
    if shown is None:
        return escape("unknown")
    schedule: Mapping[str, Any] = (
        msgspec.to_builtins(shown) if isinstance(shown, msgspec.Struct) else shown
    )
    kind = schedule.get("kind")
    if kind == "cron":
        text = Markup("<code>{}</code> in {}").format(
            schedule.get("cron"), schedule.get("timezone") or "UTC"
        )
        return text + _rules_text(schedule)
    if kind == "interval":
        text = Markup("every {} s (offset {} s) in {}").format(
            schedule.get("every_seconds"),
            schedule.get("offset_seconds") or 0,
            schedule.get("timezone") or "UTC",
        )
        return text + _rules_text(schedule)
    if kind == "once":
        run_at = schedule.get("run_at")
        moment = datetime.fromisoformat(run_at) if isinstance(run_at, str) else run_at
        return Markup("once at {}").format(when(moment))
    return escape("manual (only when triggered)")


def _rules_text(schedule: Mapping[str, Any]) -> Markup:
    """The window, exclusions and jitter of a recurring schedule, as a short tail."""
    parts: list[Markup] = []
    if schedule.get("start_at") or schedule.get("end_at"):
        parts.append(
            Markup("from {} to {}").format(
                schedule.get("start_at") or "the start", schedule.get("end_at") or "no end"
            )
        )
    if schedule.get("exclude_dates"):
        parts.append(Markup("except {}").format(", ".join(schedule["exclude_dates"])))
    if schedule.get("calendars"):
        parts.append(Markup("skipping holidays of {}").format(", ".join(schedule["calendars"])))
    if schedule.get("jitter_seconds"):
        parts.append(Markup("jitter up to {} s").format(schedule["jitter_seconds"]))
    return Markup("").join(Markup("; ") + part for part in parts)


def local_time(iso: str) -> str:
    """A fire's local time as people write it: 2026-11-30 02:30:00 +01:00."""
    moment = datetime.fromisoformat(iso)
    zone = moment.strftime("%z")
    return (
        f"{moment:%Y-%m-%d %H:%M:%S} {zone[:3]}:{zone[3:]}"
        if zone
        else f"{moment:%Y-%m-%d %H:%M:%S}"
    )


FILTERS = {
    "local_time": local_time,
    "when": when,
    "stamp": stamp,
    "duration": duration,
    "step_counts": step_counts,
    "ago": ago,
    "as_json": as_json,
    "schedule_text": schedule_text,
    "rule_filters": rule_filters,
    "rule_thresholds": rule_thresholds,
}
