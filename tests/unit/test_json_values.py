"""JSON value limits: what the stores cannot carry is refused with its path, and what is
accepted survives the event codec and the queue's spec encoding unchanged."""

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.domain import json_values
from jobledger.domain.definitions import ExecutionSpec, JobDefinition, Limits
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.job import Job
from jobledger.domain.json_values import (
    MAX_DEPTH,
    MAX_INT,
    MIN_INT,
    check_json,
    check_text,
    json_problem,
)
from jobledger.domain.policies import RetryPolicy
from jobledger.persistence.codec import MsgspecMapper
from jobledger.projections.queue.backend import decode_spec, encode_spec

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.conftest import JsonValues

AT = datetime(2026, 3, 1, tzinfo=UTC)


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def deep_list(levels: int) -> list[Any]:
    root: list[Any] = []
    inner = root
    for _ in range(levels - 1):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return root


BAD: list[Any] = [
    pytest.param({"big": 2**80}, "payload.big", "64 bits", id="int-past-64-bits"),
    pytest.param({"big": MAX_INT + 1}, "payload.big", "64 bits", id="int-max-plus-one"),
    pytest.param({"small": MIN_INT - 1}, "payload.small", "64 bits", id="int-min-minus-one"),
    pytest.param({"f": math.nan}, "payload.f", "finite", id="nan"),
    pytest.param({"f": [math.inf]}, "payload.f[0]", "finite", id="inf"),
    pytest.param({"f": -math.inf}, "payload.f", "finite", id="minus-inf"),
    pytest.param({"s": "a\x00b"}, "payload.s", "NUL", id="nul-in-string"),
    pytest.param({"a": [{"k\x00": 1}]}, 'payload.a[0]["k\\u0000"] (key)', "NUL", id="nul-key"),
    pytest.param({"s": "\ud800"}, "payload.s", "surrogate", id="lone-surrogate"),
    pytest.param({"k" * 257: 1}, f"payload.{'k' * 257} (key)", "257 characters", id="long-key"),
    pytest.param({"a b": {3: 1}}, 'payload["a b"][3]', "type int", id="int-key"),
    pytest.param({"\ud800": 1}, 'payload["\\ud800"] (key)', "surrogate", id="surrogate-key"),
    pytest.param({"a\n": "\x00"}, 'payload["a\\n"]', "NUL", id="newline-key"),
    pytest.param({"t": (1, 2)}, "payload.t", "tuple", id="tuple"),
    pytest.param({"when": AT}, "payload.when", "datetime", id="datetime"),
    pytest.param({"b": b"x"}, "payload.b", "bytes", id="bytes"),
    pytest.param(nested(MAX_DEPTH + 1), "payload" + ".a" * MAX_DEPTH, "32", id="depth-33"),
    pytest.param({"d": deep_list(100_000)}, "payload.d" + "[0]" * 31, "32", id="depth-100000"),
    pytest.param({"x": 1, "y": [1, {"z": 2**64}], "w": math.nan}, "payload.y[1].z", "", id="first"),
]


@pytest.mark.parametrize(("value", "path", "words"), BAD)
def test_values_the_stores_cannot_carry_are_refused_with_their_path(
    value: Any, path: str, words: str
) -> None:
    """If a payload holds a value the codec, PostgreSQL or Redis cannot carry, then the
    check raises naming the path of the first such part, the problem and a fix."""
    with pytest.raises(InvalidDefinitionError) as caught:
        ExecutionSpec(handler="test.echo", payload=value).check()
    assert caught.value.field == path
    assert words in caught.value.problem
    assert caught.value.fix


GOOD: list[Any] = [
    pytest.param({}, id="empty"),
    pytest.param({"max": MAX_INT, "min": MIN_INT, "f": 1.7976931348623157e308}, id="extremes"),
    pytest.param({"nested": nested(MAX_DEPTH - 1)}, id="depth-32"),
    pytest.param({"k" * 256: "\u00e9\U0001f600"}, id="long-key-and-unicode"),
    pytest.param({"a": [None, True, False, -0.0, "", {}]}, id="mixed"),
]


@pytest.mark.parametrize("value", GOOD)
def test_values_within_the_limits_pass(value: dict[str, Any]) -> None:
    """If a payload stays within the limits, then the check passes."""
    ExecutionSpec(handler="test.echo", payload=value).check()


def test_the_encoded_size_is_checked_after_the_content() -> None:
    """If a payload fits every store but its JSON is longer than the limit, then it is
    refused naming the payload and its size."""
    with pytest.raises(InvalidDefinitionError, match="over the 100-byte limit") as caught:
        check_json({"blob": "x" * 200}, "payload", max_bytes=100)
    assert caught.value.field == "payload"
    with pytest.raises(InvalidDefinitionError, match="64 bits"):
        ExecutionSpec(handler="test.echo", payload={"big": 2**64}).check(
            Limits(max_payload_bytes=1)
        )


def test_a_payload_must_be_an_object() -> None:
    """If a Python caller passes a payload that is not a dict, then it is refused."""
    with pytest.raises(InvalidDefinitionError, match="JSON object"):
        ExecutionSpec(handler="test.echo", payload=[1, 2]).check()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "words"),
    [("a\x00b", "NUL"), ("x" * 2001, "2001 characters"), ("\udfff", "surrogate"), (5, "type int")],
)
def test_texts_the_stores_cannot_hold_are_refused(text: object, words: str) -> None:
    """If a description is not text PostgreSQL can hold, then the definition is refused."""
    definition = JobDefinition(
        name="job",
        spec=ExecutionSpec(handler="test.echo"),
        description=text,  # type: ignore[arg-type]
    )
    with pytest.raises(InvalidDefinitionError, match=words) as caught:
        definition.check()
    assert caught.value.field == "description"
    check_text("fine", "reason", max_chars=10)


@pytest.mark.parametrize(
    ("name", "handler", "queue", "field"),
    [
        ("job\n", "test.echo", "default", "name"),
        ("job", "test.echo\n", "default", "handler"),
        ("job", "test.echo", "default\n", "queue"),
    ],
)
def test_names_with_a_trailing_newline_are_refused(
    name: str, handler: str, queue: str, field: str
) -> None:
    """If a name, handler or queue ends in a newline, then it is refused like any other
    character outside its pattern."""
    definition = JobDefinition(name=name, spec=ExecutionSpec(handler=handler, queue=queue))
    with pytest.raises(InvalidDefinitionError) as caught:
        definition.check()
    assert caught.value.field == field


def round_trip_through_the_codec(payload: dict[str, Any]) -> dict[str, Any]:
    spec = ExecutionSpec(handler="test.echo", payload=payload)
    execution = Execution.enqueue(spec=spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key="k")
    mapper = MsgspecMapper()
    stored = mapper.to_stored_event(execution.collect_events()[0])
    decoded = mapper.to_domain_event(stored)
    result: dict[str, Any] = decoded.spec.payload  # type: ignore[attr-defined]
    return result


def test_accepted_values_round_trip_and_refused_ones_would_break(
    json_values: type["JsonValues"],
) -> None:
    """If the check accepts a payload, then the event codec and the queue's spec
    encoding both hand it back equal; if it refuses one for its content, then one of
    them would have failed or changed it."""
    # Integers from 2**63 to 2**64 - 1 fit msgpack's unsigned form but are refused by
    # choice (a signed 64-bit integer is what every reader takes); the table covers them.
    integers = st.integers(min_value=-(2**80), max_value=MAX_INT) | st.integers(
        min_value=2**64, max_value=2**80
    )

    def round_trip_through_the_queue(payload: dict[str, Any]) -> dict[str, object]:
        return decode_spec(encode_spec(json_values.work_spec(payload))).payload

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(payload=json_values.payloads(integers, st.floats()))
    def check(payload: dict[str, Any]) -> None:
        problem = json_problem(payload)
        if problem is None:
            assert round_trip_through_the_codec(payload) == payload
            assert round_trip_through_the_queue(payload) == payload
            return
        try:
            carried = round_trip_through_the_codec(payload) == payload
            carried = carried and round_trip_through_the_queue(payload) == payload
        except (OverflowError, UnicodeEncodeError, msgspec.EncodeError):
            carried = False
        # NUL is carried by the codec and msgpack (PostgreSQL refuses it, tested there),
        # and the depth limit is a chosen bound, not a store's.
        assert not carried or "NUL" in problem.problem or "nests" in problem.problem, problem

    check()


def leased_execution() -> Execution:
    spec = ExecutionSpec(handler="test.echo", retry=RetryPolicy(max_retries=0))
    execution = Execution.enqueue(spec=spec, ready_at=AT, trigger=Trigger.ADHOC, trigger_key="k")
    execution.lease(worker_id="w", lease_id=LEASE, lease_expires_at=AT + timedelta(minutes=1))
    return execution


LEASE = uuid.UUID(int=1)


def test_a_handler_error_is_recorded_with_what_postgresql_refuses_replaced() -> None:
    """If a handler fails or defers with NUL or a lone surrogate in its message, then the
    event records the message with those replaced by U+FFFD, not a row no store holds."""
    execution = leased_execution()
    execution.defer(lease_id=LEASE, reason="open\x00circuit", ready_at=AT)
    execution.lease(worker_id="w", lease_id=LEASE, lease_expires_at=AT + timedelta(minutes=1))
    execution.fail(lease_id=LEASE, error="bad \udcff byte\x00", at=AT)
    recorded = [vars(e) for e in execution.collect_events()]
    assert recorded[2]["reason"] == "open\ufffdcircuit"
    assert execution.last_error == "bad \ufffd byte\ufffd"
    assert json_problem({"texts": [execution.last_error, recorded[2]["reason"]]}) is None


def test_operators_texts_the_stores_cannot_hold_are_refused_and_nothing_recorded() -> None:
    """If a reason, an actor or a trigger key holds NUL or is too long, then the command
    raises naming it and records no event."""
    job = Job.schedule(
        JobDefinition(name="j", spec=ExecutionSpec(handler="test.echo")), at=AT, by="a"
    )
    job.collect_events()
    commands: list[tuple[Callable[[], object], str]] = [
        (lambda: job.pause(by="a", reason="x\x00"), "reason"),
        (lambda: job.pause(by="a" * 201, reason=""), "by"),
        (lambda: job.trigger(trigger_key="k\x00", at=AT, by="a"), "trigger_key"),
        (lambda: job.delete(by="\x00"), "by"),
    ]
    execution = leased_execution()
    execution.collect_events()
    commands.append((lambda: execution.cancel(by="a", reason="r" * 2001), "reason"))
    for command, field in commands:
        with pytest.raises(InvalidDefinitionError) as caught:
            command()
        assert caught.value.field == field
    assert job.collect_events() == []
    assert execution.collect_events() == []


_awkward_text = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["a\x00b", "\ud800", "é\udfff", "k" * 300, "ok", "naïve"]),
)
_awkward_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=MIN_INT - 2, max_value=MIN_INT + 2),
    st.integers(min_value=MAX_INT - 2, max_value=MAX_INT + 2),
    st.integers(min_value=-5, max_value=5),
    st.floats(),
    _awkward_text,
    st.sampled_from([b"bytes", (1, 2), {1, 2}, AT, uuid.UUID(int=1)]),
)
_awkward_values = st.recursive(
    _awkward_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_awkward_text, children, max_size=4),
        st.dictionaries(st.integers(min_value=0, max_value=3), children, min_size=1, max_size=2),
    ),
    max_leaves=20,
)


@given(value=_awkward_values, max_depth=st.integers(min_value=0, max_value=4))
def test_the_fast_check_agrees_with_the_walk(value: object, max_depth: int) -> None:
    """If a value of plain JSON types, odd ones and ones no store carries is checked,
    then the quick check without paths says it fits exactly when the walk, which names
    the path of a problem, finds none."""
    walked = json_values._first_problem(value, "payload", max_depth)
    assert json_values._fits(value, max_depth) is (walked is None)
    assert json_problem(value, max_depth=max_depth) == walked
