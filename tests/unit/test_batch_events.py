"""A batch's first events, made without their constructor, are the domain's own."""

import dataclasses
import typing
from datetime import UTC, datetime, timedelta

import pytest

from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.limits import ConcurrencyLimit, RunLimits
from jobledger.persistence.batch_events import enqueued_batch
from jobledger.persistence.codec import MsgspecMapper

T0 = datetime(2026, 3, 8, 6, 30, tzinfo=UTC)


@dataclasses.dataclass(frozen=True)
class Run:
    spec: ExecutionSpec
    ready_at: datetime
    key: str | None


def _runs() -> list[Run]:
    limits = RunLimits(concurrency=ConcurrencyLimit(key="c:{payload.c}", max=1))
    return [
        Run(ExecutionSpec(handler="test.echo", payload={"c": 1}), T0, "k-1"),
        Run(ExecutionSpec(handler="test.echo", payload={"c": 2}, limits=limits), T0, "k-2"),
        Run(ExecutionSpec(handler="test.other", queue="q"), T0 + timedelta(seconds=5), None),
    ]


def test_a_batchs_events_are_the_ones_enqueued_makes() -> None:
    """If a batch's events are made together, then each holds what
    ``Execution.enqueued`` makes of its run, field for field and in the same order,
    is stored as the same bytes, and applied gives the same run."""
    runs = _runs()
    made = enqueued_batch(runs, trigger=Trigger.ADHOC, by="ops", via="cli")
    mapper = MsgspecMapper()
    for run, event in zip(runs, made, strict=True):
        alone = Execution.enqueued(
            spec=run.spec,
            ready_at=run.ready_at,
            trigger=Trigger.ADHOC,
            trigger_key=run.key,
            by="ops",
            via="cli",
        )
        fields = {**vars(alone), "timestamp": event.timestamp}
        if run.key is None:  # a run with no key gets a fresh id
            fields["originator_id"] = event.originator_id
        assert list(vars(event).items()) == list(fields.items())
        same = Execution.Enqueued(**fields)
        assert mapper.to_stored_event(event) == mapper.to_stored_event(same)
        applied = typing.cast("Execution", event.mutate(None))
        assert vars(applied) == vars(typing.cast("Execution", same.mutate(None)))
    assert len({e.originator_id for e in made}) == len(runs)


def test_a_run_the_domain_refuses_is_refused_in_a_batch() -> None:
    """If a run after the first is one ``Execution.enqueued`` refuses, then the batch
    raises the same error."""
    bad = Run(ExecutionSpec(handler="test.echo", expires_at=T0), T0, "k-bad")
    with pytest.raises(InvalidDefinitionError, match="expires_at"):
        enqueued_batch([*_runs(), bad], trigger=Trigger.ADHOC, by="ops", via=None)
    with pytest.raises(InvalidDefinitionError, match="trigger_key"):
        enqueued_batch(
            [*_runs(), Run(_runs()[0].spec, T0, "k" * 1000)],
            trigger=Trigger.ADHOC,
            by="ops",
            via=None,
        )
