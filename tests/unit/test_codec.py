"""The msgspec mapper: stored state is JSON and decodes with its types."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, cast

import msgspec
import pytest
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import MapperDeserialisationError, StoredEvent

from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.policies import MisfirePolicy, OverlapPolicy
from jobledger.domain.schedules import CronSchedule
from jobledger.persistence.codec import EventView, MsgspecMapper
from jobledger.projections.read_models.tables import FOLD_VIEWS

AT = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


class Sample(Aggregate):
    TOPIC = "tests:Sample"

    class Created(Aggregate.Created):
        TOPIC = "tests:SampleCreated"

    class Tagged(Aggregate.Event):
        TOPIC = "tests:SampleTagged"
        class_version: ClassVar[int] = 2
        tags: tuple[str, ...]
        weight: float

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["weight"] = 1.0

    @event(Created)
    def __init__(self) -> None:
        self.tags: tuple[str, ...] = ()

    @event(Tagged)
    def tag(self, tags: tuple[str, ...], weight: float) -> None:
        self.tags = tags
        del weight


def test_job_scheduled_round_trips_with_nested_value_objects() -> None:
    """If a JobScheduled is stored, then the definition and its enums come back typed."""
    definition = JobDefinition(
        name="n",
        spec=ExecutionSpec(handler="test.echo", timeout=timedelta(seconds=42)),
        schedule=CronSchedule("0 3 * * *", "America/New_York"),
        misfire=MisfirePolicy.FIRE_ALL,
        overlap=OverlapPolicy.SKIP_IF_RUNNING,
    )
    job = Job.schedule(definition, at=AT, by="a")
    created = job.collect_events()[0]
    mapper = MsgspecMapper()
    stored = mapper.to_stored_event(created)
    assert msgspec.json.decode(stored.state)["definition"]["schedule"]["type"] == "cron"
    restored = mapper.to_domain_event(stored)
    assert restored == created
    restored_definition = vars(restored)["definition"]
    assert isinstance(restored_definition.schedule, CronSchedule)
    assert restored_definition.misfire is MisfirePolicy.FIRE_ALL
    assert restored_definition.spec.timeout == timedelta(seconds=42)


def test_tuples_round_trip_as_tuples() -> None:
    """If an event field is a tuple, then it decodes as a tuple, not a list."""
    sample = Sample()
    sample.tag(("a", "b"), 2.5)
    tagged = sample.collect_events()[-1]
    mapper = MsgspecMapper()
    restored = mapper.to_domain_event(mapper.to_stored_event(tagged))
    assert vars(restored)["tags"] == ("a", "b")
    assert vars(restored)["weight"] == 2.5


def test_old_event_shapes_are_upcast_then_typed() -> None:
    """If a stored event has an older class_version, then it is upcast and typed."""
    old_state = msgspec.json.encode({"timestamp": AT.isoformat(), "tags": ["x"]})
    stored = StoredEvent(
        originator_id=uuid.uuid4(),
        originator_version=2,
        topic="tests:SampleTagged",
        state=old_state,
    )
    restored = MsgspecMapper().to_domain_event(stored)
    assert vars(restored)["tags"] == ("x",)
    assert vars(restored)["weight"] == 1.0
    assert vars(restored)["timestamp"] == AT


def test_an_event_stored_before_a_field_was_added_takes_its_default() -> None:
    """If a JobUpdated or JobDeleted stored before events had a source and an override
    is read, then it decodes, as a change made over the API without an override."""
    spec = msgspec.to_builtins(ExecutionSpec(handler="test.echo"))
    old_states = {
        "jobledger:JobUpdated": {
            "timestamp": AT.isoformat(),
            "definition": {"name": "n", "spec": spec},
            "next_fire_at": None,
            "by": "bob",
        },
        "jobledger:JobDeleted": {"timestamp": AT.isoformat(), "by": "bob"},
    }
    for topic, state in old_states.items():
        stored = StoredEvent(
            originator_id=uuid.uuid4(),
            originator_version=2,
            topic=topic,
            state=msgspec.json.encode(state),
        )
        restored = vars(MsgspecMapper().to_domain_event(stored))
        assert (restored["source"], restored["override"], restored["by"]) == ("api", False, "bob")


def test_corrupt_state_names_the_event() -> None:
    """If stored state does not match the event type, then the error names the event."""
    stored = StoredEvent(
        originator_id=uuid.uuid4(),
        originator_version=1,
        topic="jobledger:JobDeleted",
        state=b'{"timestamp": "not a time", "by": 3}',
    )
    with pytest.raises(MapperDeserialisationError, match="jobledger:JobDeleted"):
        MsgspecMapper().to_domain_event(stored)


# ---- views: a reader decodes only what it reads -----------------------------------


class _Spec(msgspec.Struct, kw_only=True):
    handler: str
    queue: str = "default"


_VIEWS = (
    EventView(Execution.Enqueued, ("timestamp", "spec", "attempt"), {"spec": _Spec}),
    EventView(Execution.Completed, ("timestamp", "result"), {"result": msgspec.Raw}),
)


def _stored_run(mapper: MsgspecMapper) -> list[StoredEvent]:
    """A run enqueued (with a payload), leased and completed, as stored."""
    spec = ExecutionSpec(handler="test.echo", payload={"big": ["x"] * 50}, queue="q")
    run = Execution.enqueue(spec=spec, ready_at=AT, trigger=Trigger.ADHOC)
    lease_id = uuid.uuid4()
    run.lease(worker_id="w", lease_id=lease_id, lease_expires_at=AT)
    run.complete(lease_id=lease_id, duration=timedelta(seconds=2), result={"n": 1.5, "é": "\x00"})
    return [mapper.to_stored_event(e) for e in run.collect_events()]


def _decoded(decode: Any, stored: StoredEvent) -> Any:
    return decode(stored.originator_id, stored.originator_version, stored.topic, stored.state)


def test_a_view_decodes_only_the_fields_it_names_into_its_struct() -> None:
    """If an event's class has a view, then it decodes into the view's struct with the
    view's fields only (typed as the view says: a nested struct, JSON kept as its text,
    which encodes back to what the full decode encodes to) and the originator's id and
    version, and the events of other classes decode whole."""
    mapper = MsgspecMapper()
    enqueued, leased, completed = _stored_run(mapper)
    viewed = mapper.viewed(_VIEWS)
    run = _decoded(viewed, enqueued)
    kind = type(run)
    assert kind is _VIEWS[0].struct
    assert (run.spec.handler, run.spec.queue, run.attempt, run.timestamp.tzinfo) == (
        "test.echo",
        "q",
        1,
        UTC,
    )
    assert (run.originator_id, run.originator_version) == (enqueued.originator_id, 1)
    with pytest.raises(AttributeError):
        _ = run.ready_at
    with pytest.raises(AttributeError):
        _ = run.spec.payload
    done = _decoded(viewed, completed)
    full: Any = mapper.to_domain_event(completed)
    encoder = msgspec.json.Encoder()
    assert encoder.encode(done.result) == encoder.encode(full.result)
    assert vars(_decoded(viewed, leased)) == vars(mapper.to_domain_event(leased))


def test_a_view_leaves_a_state_that_needs_another_step_to_the_full_decode() -> None:
    """If the store compresses its states, then an event with a view decodes whole, as
    it would without one."""
    mapper = MsgspecMapper(compressor=ZlibCompressor())
    enqueued, _leased, _completed = _stored_run(mapper)
    run = _decoded(mapper.viewed(_VIEWS), enqueued)
    assert run.spec.payload == {"big": ["x"] * 50}
    assert vars(run) == vars(mapper.to_domain_event(enqueued))


def test_a_corrupt_state_read_through_a_view_names_the_event() -> None:
    """If a state does not match its view, then the error names the event."""
    stored = StoredEvent(
        originator_id=uuid.uuid4(),
        originator_version=3,
        topic=Execution.Completed.TOPIC,
        state=b'{"timestamp": "not a time", "result": {}}',
    )
    with pytest.raises(MapperDeserialisationError, match="ExecutionCompleted"):
        _decoded(MsgspecMapper().viewed(_VIEWS), stored)


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
def test_a_stored_row_holds_the_stored_events_columns(compressed: bool) -> None:
    """If an event is stored as a row (a bulk save's columns), then the row holds what
    the stored event holds, field for field, and decodes to the same event."""
    mapper = MsgspecMapper(compressor=ZlibCompressor() if compressed else None)
    run = Execution.enqueue(
        spec=ExecutionSpec(handler="test.echo", payload={"n": 1}),
        ready_at=AT,
        trigger=Trigger.ADHOC,
    )
    run.lease(worker_id="w", lease_id=uuid.uuid4(), lease_expires_at=AT)
    for domain_event in run.collect_events():
        row = mapper.to_stored_row(domain_event)
        stored = mapper.to_stored_event(domain_event)
        assert StoredEvent(*row) == stored
        assert row._asdict() == vars(stored)
        assert mapper.to_domain_event(StoredEvent(*row)) == domain_event


_DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "state",
    [
        b'{"timestamp": "2026-01-01T00:00:00Z", "result": {"a": ' + _DEEP + b"}}",
        b'{"timestamp": "2026-01-01T00:00:00Z", "duration": 1' + b"0" * 5000 + b"}",
        b'{"timestamp": "2026-01-01T00:00:00\xff", "result": {}}',
    ],
    ids=["nested-100000-deep", "huge-number", "invalid-utf8"],
)
def test_a_state_no_decoder_reads_names_the_event_whichever_way_it_is_read(state: bytes) -> None:
    """If a stored state is nested past the decoder's depth, holds a number past what
    Python converts, or is not UTF-8, then the full decode and a view's decode both
    raise the mapper's error naming the event (which a reader isolates), never the
    decoder's own error."""
    stored = StoredEvent(
        originator_id=uuid.uuid4(),
        originator_version=3,
        topic=Execution.Completed.TOPIC,
        state=state,
    )
    mapper = MsgspecMapper()
    with pytest.raises(MapperDeserialisationError, match="ExecutionCompleted"):
        mapper.to_domain_event(stored)
    with pytest.raises(MapperDeserialisationError, match="ExecutionCompleted"):
        _decoded(mapper.viewed(_VIEWS), stored)


# An ad-hoc run's ExecutionEnqueued and an operator's cancel as stored before events
# recorded who asked for a run and how they came (``by``, ``via``).
_ENQUEUED_BEFORE_VIA = (
    b'{"timestamp":"2026-03-29T00:30:00Z","originator_topic":"jobledger:Execution",'
    b'"job_id":null,"spec":{"handler":"test.echo","payload":{"n":1},"queue":"default",'
    b'"priority":5,"timeout":"PT300S","retry":{"max_retries":3,"initial_backoff":"PT1S",'
    b'"max_backoff":"PT300S","jitter":true},"limits":null},"trigger":"adhoc",'
    b'"scheduled_for":null,"trigger_key":"k","ready_at":"2026-03-29T00:30:00Z","attempt":1,'
    b'"upstream_results":null,"workflow_id":null,"step":null}'
)
_CANCELLED_BEFORE_VIA = b'{"timestamp":"2026-03-29T00:31:00Z","by":"ada","reason":"typo"}'


def test_events_stored_before_by_and_via_decode_without_them() -> None:
    """If an ExecutionEnqueued and an ExecutionCancelled were stored before events
    recorded ``by`` and ``via``, then they decode, whole and through the read models'
    view, with both None (the cancel keeps its ``by``), and the run they begin has
    none either."""
    run_id = uuid.uuid4()
    mapper = MsgspecMapper()
    enqueued_state = StoredEvent(run_id, 1, Execution.Enqueued.TOPIC, _ENQUEUED_BEFORE_VIA)
    enqueued = mapper.to_domain_event(enqueued_state)
    assert isinstance(enqueued, Execution.Enqueued)
    assert (enqueued.by, enqueued.via, enqueued.trigger_key) == (None, None, "k")
    run = cast("Execution", enqueued.mutate(None))
    assert (run.enqueued_by, run.enqueued_via) == (None, None)
    viewed = _decoded(mapper.viewed(FOLD_VIEWS), enqueued_state)
    assert (viewed.by, viewed.via) == (None, None)
    cancelled = mapper.to_domain_event(
        StoredEvent(run_id, 2, Execution.Cancelled.TOPIC, _CANCELLED_BEFORE_VIA)
    )
    assert isinstance(cancelled, Execution.Cancelled)
    assert (cancelled.by, cancelled.via, cancelled.reason) == ("ada", None, "typo")
    cancelled.mutate(run)
    assert run.status == "cancelled"
