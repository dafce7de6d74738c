"""JSON value limits against the real stores: every payload the check accepts survives
PostgreSQL (jsonb and text) and Redis (the queue's spec encoding) unchanged, and the
NUL characters it refuses are what PostgreSQL refuses."""

import json
import math
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec
import psycopg
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.domain.json_values import MAX_INT, MIN_INT, json_problem
from jobledger.projections.queue.backend import decode_spec, encode_spec

if TYPE_CHECKING:
    from tests.conftest import JsonValues


def same(expected: Any, actual: Any) -> bool:
    """Equal as JSON: a float read back from jsonb's numeric may come as an int."""
    if isinstance(expected, float):
        return isinstance(actual, (int, float)) and float(actual) == expected
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(same(value, actual[key]) for key, value in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(same(a, b) for a, b in zip(expected, actual, strict=True))
        )
    return type(expected) is type(actual) and expected == actual


@pytest.fixture
def connection(postgres_url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


def test_accepted_payloads_survive_postgresql_and_redis(
    connection: psycopg.Connection[tuple[Any, ...]],
    redis_client: redis.Redis,
    json_values: type["JsonValues"],
) -> None:
    """If the check accepts a payload, then PostgreSQL jsonb and text and the queue's
    spec in Redis all give it back equal."""
    key = f"limits:{uuid.uuid4().hex}"

    @settings(
        max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(
        payload=json_values.payloads(
            st.integers(MIN_INT, MAX_INT), st.floats(width=64).filter(math.isfinite)
        )
    )
    def check(payload: dict[str, Any]) -> None:
        problem = json_problem(payload)
        text = msgspec.json.encode(payload).decode()
        if problem is not None:
            assert "NUL" in problem.problem, problem  # the only refusal these values reach
            with pytest.raises(psycopg.errors.UntranslatableCharacter):
                connection.execute("SELECT %s::jsonb", (text,))
            return
        row = connection.execute("SELECT %s::jsonb::text, %s::text", (text, text)).fetchone()
        assert row is not None
        assert same(payload, json.loads(row[0]))
        assert msgspec.json.decode(row[1]) == payload
        redis_client.set(key, encode_spec(json_values.work_spec(payload)))
        stored = redis_client.get(key)
        assert isinstance(stored, bytes)
        assert decode_spec(stored).payload == payload

    try:
        check()
    finally:
        redis_client.delete(key)


def test_a_nul_in_a_key_or_value_is_what_postgresql_refuses(
    connection: psycopg.Connection[tuple[Any, ...]],
) -> None:
    """If a key or a string holds NUL, then PostgreSQL refuses it as jsonb and as text,
    which is why the check refuses it."""
    for payload in ({"k\x00": 1}, {"a": ["x\x00"]}):
        assert json_problem(payload) is not None
        with pytest.raises(psycopg.errors.UntranslatableCharacter):
            connection.execute("SELECT %s::jsonb", (msgspec.json.encode(payload).decode(),))
    with pytest.raises(psycopg.DataError):
        connection.execute("SELECT %s::text", ("x\x00",))
