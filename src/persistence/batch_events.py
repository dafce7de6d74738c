"""The first events of a batch of ad-hoc runs, made for the batch API's save (ADR 83).

``Execution.enqueued`` makes a run's event by making the run, as ``enqueue`` does: 16 µs
a run, where a copy and its stored row take 6. Here the domain makes the batch's first
event; every other run's is a copy of its fields with the run's own set, made without
the constructor, after the domain's checks. A field the event gains comes with the copy,
and a test holds each event equal to the one ``Execution.enqueued`` makes, as stored
bytes."""

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol, cast

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger, check_request
from jobledger.persistence.codec import unchecked_event


class AdhocRun(Protocol):
    """What differs between the runs of one batch (a ``key``: the run's trigger key)."""

    @property
    def spec(self) -> ExecutionSpec: ...
    @property
    def ready_at(self) -> datetime: ...
    @property
    def key(self) -> str | None: ...


def enqueued_batch(
    runs: Iterable[AdhocRun], *, trigger: Trigger, by: str | None, via: str | None
) -> list[Execution.Enqueued]:
    """``Execution.enqueued`` for each of ``runs``, in order, asked for by ``by`` through
    ``via``; a run the domain refuses raises as it would there."""
    made: list[Execution.Enqueued] = []
    template: dict[str, Any] | None = None
    for run in runs:
        if template is None:
            first = Execution.enqueued(
                spec=run.spec,
                ready_at=run.ready_at,
                trigger=trigger,
                trigger_key=run.key,
                by=by,
                via=via,
            )
            template = vars(first)
            made.append(first)
            continue
        check_request(run.spec, ready_at=run.ready_at, trigger_key=run.key, by=by)
        made.append(_copied(template, run.spec, run.ready_at, run.key))
    return made


def _copied(
    template: dict[str, Any], spec: ExecutionSpec, ready_at: datetime, trigger_key: str | None
) -> Execution.Enqueued:
    """The template's event with one run's own fields, as ``Execution.enqueued`` sets them."""
    fields = template.copy()
    fields["timestamp"] = Execution.Enqueued.create_timestamp()
    fields["spec"] = spec.resolved()
    fields["trigger_key"] = trigger_key
    fields["ready_at"] = ready_at
    run_id = Execution.create_id(None, None, trigger_key)
    event = unchecked_event(Execution.Enqueued, fields, run_id, Execution.INITIAL_VERSION)
    return cast("Execution.Enqueued", event)
