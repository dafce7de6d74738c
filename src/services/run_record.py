"""What a run's own stream says beyond its read-model row: its input and the lines its
handler logged (the read models keep neither: ADR 59, ADR 104)."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jobledger.domain.execution import Execution
from jobledger.schemas.rows import LogLineRow


@dataclass(frozen=True)
class RunRecord:
    """A run's input as it stands, its handler's lines and how many were left out."""

    payload: dict[str, Any] | None = None
    logs: list[LogLineRow] = field(default_factory=list)
    dropped: int = 0


def run_record(events: Iterable[Any]) -> RunRecord:
    """The record of a run from its events (a placeholder of one that no longer decodes
    is passed over: the rest still show)."""
    payload: dict[str, Any] | None = None
    logs: list[LogLineRow] = []
    dropped = 0
    for event in events:
        match event:
            case Execution.Enqueued() | Execution.Skipped():
                payload = dict(event.spec.payload)
            case Execution.Replaced() | Execution.Debounced():
                payload = dict(event.payload)
            case Execution.Logged():
                logs.extend(_rows(event))
                dropped += event.dropped
    return RunRecord(payload, logs, dropped)


def _rows(event: Execution.Logged) -> list[LogLineRow]:
    return [
        LogLineRow(
            attempt=event.attempt,
            at=line.at,
            level=line.level,
            message=line.message,
            fields=line.fields,
        )
        for line in event.lines
    ]
