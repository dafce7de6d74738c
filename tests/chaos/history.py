"""What a fault run leaves behind, as the history checker reads it.

The event log, the effects ledger that the chaos handlers append to, what the API
accepted, the faults that were injected and when, and what the projections showed at
the end. Everything here is plain data: a test can write a history by hand, and a run
reads one from its stores (``read_log``, ``read_effects``).
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Notification

UNDECODABLE = "Undecodable"
_PAGE = 1000
_ENVELOPE = frozenset({"originator_id", "originator_version", "timestamp"})
_LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Event:
    """One event of the log: its position, stream and version, its type as the API
    names it (``ExecutionLeased``), when it was made, and its fields."""

    position: int
    stream: UUID
    version: int
    type: str
    at: datetime
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Effect:
    """One handler invocation, from the effects ledger: ``end`` is None when it never
    finished (its worker died); ``durable`` when its side effect was made."""

    invocation: str
    execution_id: UUID
    attempt: int
    worker: str
    start: datetime
    end: datetime | None = None
    durable: bool = False


@dataclass(frozen=True)
class Accepted:
    """A request the API answered 2xx: an ad-hoc run or a trigger (with the execution
    it named), or a job (whose occurrences it then owes)."""

    kind: str  # "adhoc" | "trigger" | "job"
    at: datetime
    execution_id: UUID | None = None
    job_id: UUID | None = None
    key: str | None = None


@dataclass(frozen=True)
class Fault:
    """One injected fault: what, on which role (and the process it hit), and when it
    began and ended (the same instant for a one-off, such as a FLUSHALL)."""

    kind: str
    target: str
    start: datetime
    end: datetime
    pid: int | None = None


@dataclass(frozen=True)
class Views:
    """What the projections showed after quiescence."""

    queue_differences: Sequence[str] = ()  # lines of `queue verify` naming a difference
    quarantined: frozenset[UUID] = frozenset()  # streams with a quarantined event
    read_models: Mapping[str, Sequence[tuple[Any, ...]]] = field(default_factory=dict)
    rebuilt: Mapping[str, Sequence[tuple[Any, ...]]] = field(default_factory=dict)
    dlq_read_model: frozenset[UUID] = frozenset()
    dlq_queue: frozenset[UUID] = frozenset()


@dataclass(frozen=True)
class History:
    events: Sequence[Event]
    effects: Sequence[Effect] = ()
    accepted: Sequence[Accepted] = ()
    # Each idempotency key the workload sent, and every execution id the API answered.
    answers: Mapping[str, frozenset[UUID]] = field(default_factory=dict)
    views: Views = field(default_factory=Views)
    faults: Sequence[Fault] = ()
    exits: Sequence[str] = ()  # roles that exited by themselves, each described
    # From here on no fault runs and a leader leads: every due occurrence is owed.
    settled_at: datetime | None = None
    grace: timedelta = timedelta(seconds=60)  # the misfire grace the schedulers ran with
    injected: frozenset[UUID] = frozenset()  # streams written as unprojectable events


# ---- reading a run's stores --------------------------------------------------------


def read_log(ledger: Application[UUID]) -> list[Event]:
    """Every event of the log in log order; one that does not decode as a placeholder
    of type ``Undecodable``."""
    return list(_log_events(ledger))


def _log_events(ledger: Application[UUID]) -> Iterator[Event]:
    start = 1
    while page := ledger.recorder.select_notifications(start, _PAGE):
        for stored in page:
            yield _decoded(ledger, stored)
        start = page[-1].id + 1


def _decoded(ledger: Application[UUID], stored: Notification) -> Event:
    try:
        domain_event = ledger.mapper.to_domain_event(stored)
    except Exception:  # noqa: BLE001 (as the ledger's readers do: an old shape is shown, not raised)
        stream = UUID(str(stored.originator_id))
        placeholder = {"topic": stored.topic}
        return Event(
            stored.id, stream, stored.originator_version, UNDECODABLE, _LONG_AGO, placeholder
        )
    return as_event(domain_event, stored.id)


def as_event(domain_event: Any, position: int) -> Event:
    fields = {k: v for k, v in vars(domain_event).items() if k not in _ENVELOPE}
    return Event(
        position,
        domain_event.originator_id,
        domain_event.originator_version,
        type(domain_event).TOPIC.rpartition(":")[2],
        domain_event.timestamp,
        fields,
    )


def read_effects(folder: Path) -> list[Effect]:
    """The invocations in the effects ledger (one file per worker process). A line cut
    short by a kill -9 is the last of its file and is skipped: its step never happened
    as far as anyone could tell."""
    steps: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            steps.setdefault(record["invocation"], []).append(record)
    return [_effect(records) for records in steps.values()]


def _effect(records: list[dict[str, Any]]) -> Effect:
    start = next(r for r in records if r["step"] == "start")
    end = next((r for r in records if r["step"] == "end"), None)
    return Effect(
        invocation=start["invocation"],
        execution_id=UUID(start["execution_id"]),
        attempt=int(start["attempt"]),
        worker=start["worker"],
        start=datetime.fromtimestamp(start["at"], UTC),
        end=datetime.fromtimestamp(end["at"], UTC) if end else None,
        durable=bool(end and end["durable"]),
    )
