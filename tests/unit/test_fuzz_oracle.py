"""The fuzz campaign's checks, on answers made up here: they flag what they must."""

from types import SimpleNamespace
from typing import Any

import pytest
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.openapi.checks import EnsureResourceAvailability, UseAfterFree
from tests.integration.api.fuzz_checks import Answer, Snapshot, Tally, Target, check_answer
from tests.integration.api.fuzz_definitions import Mismatch, difference, same
from tests.integration.api.fuzz_inputs import Raw, encode, read
from tests.integration.api.fuzz_stateful import classify

from jobledger.domain.roles import Role

JOB_ID = "6f8eae77-6a81-4c5c-80f1-de88618cbe42"
REFUSED = b'{"error": {"status": 409, "code": "conflict", "message": "no"}}'
STILL = Snapshot(7, ("a", "b", "c"), "d")


class Unused:
    def snapshot(self) -> Snapshot:
        raise AssertionError

    def close(self) -> None:
        pass


TARGET = Target(
    url="http://127.0.0.1:1",
    tokens={},
    probe=Unused(),
    needs={
        ("POST", "/api/v1/jobs/{job_id}/trigger"): Role.OPERATOR,
        ("POST", "/api/v1/auth/login"): None,
    },
    protected=frozenset(),
)


def kinds(answer: Answer, role: Role = Role.OPERATOR, after: Snapshot = STILL) -> set[str]:
    tally = Tally("unit", str(role))
    check_answer(TARGET, tally, role, answer, before=STILL, after=after)
    assert tally.inputs == 1
    return set(tally.violations)


def trigger(status: int, content: bytes = REFUSED, job_id: str = JOB_ID) -> Answer:
    path = f"/api/v1/jobs/{job_id}/trigger"
    return Answer("POST", "/api/v1/jobs/{job_id}/trigger", path, b"", status, content)


def test_a_clean_refusal_and_an_answer_pass() -> None:
    """If a refusal has the error shape and nothing moved, or a request succeeds, then
    nothing is flagged."""
    assert kinds(trigger(409)) == set()
    assert kinds(trigger(202, b'{"id": "x"}'), after=Snapshot(8, ("e", "f", "g"), "h")) == set()


@pytest.mark.parametrize(
    ("after", "why"),
    [
        (Snapshot(8, ("a", "b", "c"), "d"), "log head"),
        (Snapshot(7, ("a", "x", "c"), "d"), "accounts"),
        (Snapshot(7, ("a", "b", "c"), "x"), "bookings"),
    ],
)
def test_a_refusal_that_wrote_is_flagged(after: Snapshot, why: str) -> None:
    """If a 4xx moved the log head, changed an account or booked a sign-in outside a
    sign-in, then it is a write on a refusal."""
    assert kinds(trigger(409), after=after) == {"write on refusal"}, why


def test_a_refused_sign_in_may_book_a_failure() -> None:
    """If a sign-in is refused, then its booking is no violation (ADR 21)."""
    content = b'{"error": {"status": 401, "code": "unauthenticated", "message": "no"}}'
    login = Answer("POST", "/api/v1/auth/login", "/api/v1/auth/login", b"{}", 401, content)
    assert kinds(login, after=Snapshot(7, ("a", "b", "c"), "x")) == set()


def test_a_role_below_the_route_must_get_403() -> None:
    """If a viewer gets anything but 403 from an operator's route, then it is flagged,
    unless the path's id is no UUID (no route matches: 404 before any guard)."""
    assert (
        kinds(trigger(403, b'{"error": {"status": 403, "code": "f", "message": "m"}}'), Role.VIEWER)
        == set()
    )
    assert "role" in kinds(trigger(202, b"{}"), Role.VIEWER)
    assert "role" in kinds(trigger(404, REFUSED.replace(b"409", b"404")), Role.VIEWER)
    not_found = b'{"error": {"status": 404, "code": "not_found", "message": "m"}}'
    assert kinds(trigger(404, not_found, job_id="not-a-uuid"), Role.VIEWER) == set()


@pytest.mark.parametrize(
    "content",
    [
        b"Internal Server Error",
        b'{"detail": "no"}',
        b'{"error": {"status": 400, "code": "conflict", "message": "no"}}',
        b'{"error": {"status": 409, "code": "", "message": "no"}}',
        b'{"error": {"status": 409, "code": "c", "message": "no", "trace": "..."}}',
        b'{"error": {"status": 409, "code": "c", "message": "no", "fix": 3}}',
    ],
)
def test_a_refusal_without_the_error_shape_is_flagged(content: bytes) -> None:
    """If a refusal's body is not one error object with its status, code and message,
    then its shape is flagged."""
    assert kinds(trigger(409, content)) == {"error shape"}


def test_a_refused_input_must_name_its_fix() -> None:
    """If a 400 or 422 names no fix, then it is flagged; other refusals need none."""
    bare = b'{"error": {"status": 422, "code": "invalid", "message": "no"}}'
    assert kinds(trigger(422, bare)) == {"no fix"}
    fixed = bare.replace(b'"no"}', b'"no", "fix": "send a valid one"}')
    assert kinds(trigger(422, fixed)) == set()


def test_a_server_error_is_flagged() -> None:
    """If the answer is a 5xx, then it is flagged, whatever its body."""
    assert "5xx" in kinds(trigger(500, b'{"error": {"status": 500, "code": "c", "message": "m"}}'))


def test_payloads_compare_as_json_types() -> None:
    """If a payload reads back with 1.0 for 1, true for 1 or 0.0 for -0.0, then it is not
    the same; a key order is no difference."""
    assert same({"a": 1, "b": [1.5, None]}, {"b": [1.5, None], "a": 1})
    for left, right in [(1, 1.0), (1, True), (-0.0, 0.0), ([1], [1, 2]), ("1", 1)]:
        assert not same({"a": left}, {"a": right})


def test_definitions_read_back_with_their_tolerances() -> None:
    """If a definition reads back with a duration rounded to the microsecond, a number as
    float or a time with another offset, then it is the same; text taken as a number is
    a coercion, anything else a round-trip difference."""
    sent: dict[str, Any] = {
        "retry": {"initial_backoff_seconds": 254.3211235198621, "max_retries": 3},
        "schedule": {"kind": "once", "run_at": "2026-12-01T14:00:00+14:00"},
        "payload": {"n": 1},
    }
    kept: dict[str, Any] = {
        "retry": {"initial_backoff_seconds": 254.321124, "max_retries": 3.0},
        "schedule": {"kind": "once", "run_at": "2026-12-01T00:00:00Z"},
        "payload": {"n": 1},
    }
    assert difference(sent, kept, "definition") is None
    coerced = difference({"priority": "5"}, {"priority": 5}, "definition")
    assert isinstance(coerced, Mismatch)
    assert coerced.kind == "coerced"
    changed = difference(sent, kept | {"payload": {"n": 1.0}}, "definition")
    assert isinstance(changed, Mismatch)
    assert (changed.where, changed.kind) == ("definition.payload", "round trip")


def test_values_are_written_as_raw_json_text() -> None:
    """If a value holds a raw token, a non-finite float or a lone surrogate, then it is
    written as such, and strict JSON cannot read it back."""
    text = encode({"a": Raw("9" * 5), "b": float("nan"), "c": "\ud800"}, ascii_only=True)
    assert text == b'{"a":99999,"b":NaN,"c":"\\ud800"}'
    assert encode("\ud800", ascii_only=False) == b'"\xed\xa0\x80"'
    assert read(text) is not None
    assert read(b'{"b": NaN}') is read(b"\xed\xa0\x80") is read(b"[" * 100_000)


def failed(path: str, content: bytes) -> tuple[Any, Any]:
    """A case of ``path`` and its answer, as far as ``classify`` reads them."""
    case = SimpleNamespace(operation=SimpleNamespace(path=path))
    return case, SimpleNamespace(content=content)


def negative(component: str) -> AcceptedNegativeData:
    message = (
        f"Invalid data should have been rejected\nExpected: 400\nInvalid component: {component}"
    )
    return AcceptedNegativeData(
        operation="GET", message=message, status_code=200, expected_statuses=[]
    )


@pytest.mark.parametrize(
    ("failure", "path", "content", "kind", "documented"),
    [
        pytest.param(
            UseAfterFree(operation="GET", message="m", free="DELETE", usage="GET"),
            "/api/v1/jobs/{job_id}/preview",
            b'{"timezone": "UTC", "fires": [{"at": "2027-01-01T00:00:00Z"}]}',
            "preview after delete",
            False,
            id="preview-with-fires",
        ),
        pytest.param(
            UseAfterFree(operation="GET", message="m", free="DELETE", usage="GET"),
            "/api/v1/jobs/{job_id}/preview",
            b'{"timezone": "UTC", "fires": []}',
            "history after delete",
            True,
            id="empty-preview",
        ),
        pytest.param(
            UseAfterFree(operation="GET", message="m", free="DELETE", usage="GET"),
            "/api/v1/users/{user_id}",
            b"{}",
            "contract",
            False,
            id="user-after-delete",
        ),
        pytest.param(
            EnsureResourceAvailability(
                operation="GET", message="m", created_with="POST", not_available_with="GET"
            ),
            "/api/v1/executions/{execution_id}",
            b'{"error": {"message": "execution x is not in the read model yet"}}',
            "read model lag",
            True,
            id="read-model-lag",
        ),
        pytest.param(
            negative(
                "parameters `until`, `status` in query\n  - violates (was null, became integer)"
            ),
            "/api/v1/executions",
            b"{}",
            "coerced",
            False,
            id="number-as-time",
        ),
        pytest.param(
            negative("parameter `handler` in query - violates (was null, became object)"),
            "/api/v1/executions",
            b"{}",
            "unknown query parameter",
            False,
            id="object-as-keys",
        ),
        pytest.param(
            negative("in body - violates (was string, became integer)"),
            "/api/v1/jobs",
            b"{}",
            "contract",
            False,
            id="body",
        ),
    ],
)
def test_schemathesis_failures_are_told_apart(
    failure: Exception, path: str, content: bytes, kind: str, documented: bool
) -> None:
    """If Schemathesis reports a failure, then what the API documents is counted apart,
    a known finding gets its own kind, and anything else is a contract violation."""
    case, response = failed(path, content)
    assert classify(failure, case, response) == (kind, documented)
