"""The definitions part of the fuzz campaign: hypothesis sends job definitions, ad-hoc
runs, job changes, schedule previews and list queries from ``fuzz_inputs`` over real
HTTP. A refusal must name the problem (a 422 also its field) and write nothing; an
accepted input must come back as it was sent: in the answer, from the log, and later
from the read models."""

import itertools
import math
import time
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

import httpx
import hypothesis
from hypothesis import strategies as st
from tests.integration.api import fuzz_inputs as inputs
from tests.integration.api.fuzz_checks import (
    Answer,
    CrashError,
    Tally,
    Target,
    check_answer,
    rounds,
    settings,
)

from jobledger.domain.roles import Role

ROUTES: Final = {
    "job": ("POST", "/api/v1/jobs"),
    "run": ("POST", "/api/v1/executions"),
    "change": ("PATCH", "/api/v1/jobs/{job_id}"),
    "preview": ("POST", "/api/v1/schedules/preview"),
    "job as of": ("GET", "/api/v1/jobs/{job_id}"),
    "executions": ("GET", "/api/v1/executions"),
    "audit": ("GET", "/api/v1/audit/events"),
    "dead letters": ("GET", "/api/v1/dlq"),
    "jobs": ("GET", "/api/v1/jobs"),
}
DEFAULT_FIRES: Final = 10
PAGE: Final = 500
JSON: Final = {"Content-Type": "application/json"}


class Mismatch(NamedTuple):
    """Where an accepted input reads back otherwise than it was sent."""

    where: str
    expected: Any
    actual: Any

    @property
    def kind(self) -> str:
        """``coerced`` when a value came back as another JSON type (text as a number, a
        number as a flag): the body decoder converts loosely, a known finding tested on
        its own; ``round trip`` for any other difference."""
        scalars = not isinstance(self.expected, (dict, list)) and not isinstance(
            self.actual, (dict, list)
        )
        retyped = type(self.expected) is not type(self.actual)
        numbers = _number(self.expected) and _number(self.actual)
        return "coerced" if scalars and retyped and not numbers else "round trip"

    def __str__(self) -> str:
        return f"{self.where} is {self.actual!r}, not {self.expected!r}"


def drawn(payload: inputs.Field) -> st.SearchStrategy[tuple[str, Any]]:
    """(route kind, a value to write as JSON, bytes to send as they are, or the query
    parameters of a read)."""
    raw = st.tuples(st.sampled_from(["job", "run", "preview"]), st.sampled_from(inputs.RAW_BODIES))
    return st.one_of(
        st.tuples(st.just("job"), inputs.definitions(payload)),
        st.tuples(st.just("job"), inputs.definitions(payload)),
        st.tuples(st.just("run"), inputs.executions(payload)),
        st.tuples(st.just("change"), inputs.changes(payload)),
        st.tuples(st.just("preview"), inputs.previews()),
        st.tuples(st.just("job"), inputs.scheduled()),
        raw,
        inputs.reads(),
    )


class Session:
    """One role's inputs against the API, and the jobs it got accepted."""

    def __init__(self, target: Target, role: Role, tally: Tally) -> None:
        self.target, self.role, self.tally = target, role, tally
        self.client = httpx.Client(base_url=target.url, headers=target.headers(role), timeout=30)
        self.jobs: dict[str, dict[str, Any]] = {}  # id -> definition as last accepted
        self.defaults: dict[str, Any] = {}

    def start(self) -> None:
        """A job of defaults only: what an unsent field becomes, and a job to change."""
        created = self.client.post(
            "/api/v1/jobs", json={"name": "defaults", "handler": "test.echo"}
        )
        created.raise_for_status()
        self.defaults = created.json()["definition"]
        self.jobs[created.json()["id"]] = self.defaults

    def close(self) -> None:
        self.client.close()

    def send(self, kind: str, value: Any, *, ascii_only: bool, pick: int) -> None:
        method, route = ROUTES[kind]
        job_id = list(self.jobs)[pick % len(self.jobs)]
        path = route.format(job_id=job_id)
        if method == "GET":
            path, sent = f"{path}?{inputs.query(value)}", b""
        elif isinstance(value, bytes):
            sent = value
        else:
            sent = inputs.encode(value, ascii_only=ascii_only)
        before = self.target.probe.snapshot()
        try:
            response = self.client.request(method, path, content=sent or None, headers=JSON)
        except httpx.TransportError as error:
            self.tally.violation("crash", f"{method} {path}: {type(error).__name__}")
            raise CrashError from error
        answer = Answer(method, route, path, sent, response.status_code, response.content)
        after = self.target.probe.snapshot()
        check_answer(self.target, self.tally, self.role, answer, before=before, after=after)
        if response.status_code in {400, 422}:
            self._check_refusal(answer, response)
        elif response.is_success and method != "GET":
            self._check_accepted(kind, inputs.read(sent), answer, response, job_id)

    def _check_refusal(self, answer: Answer, response: httpx.Response) -> None:
        try:
            error = response.json().get("error", {})
        except ValueError:
            return  # the shape check has recorded it
        self.tally.refused[str(error.get("field") or error.get("code"))] += 1
        if response.status_code == 422 and not error.get("field"):
            self.tally.violation("error shape", f"a 422 that names no field: {answer.describe()}")

    def _check_accepted(
        self,
        kind: str,
        expected: Any,
        answer: Answer,
        response: httpx.Response,
        job_id: str,
    ) -> None:
        if expected is inputs.UNREADABLE or not isinstance(expected, dict):
            self.tally.violation("accepted", f"not a JSON object: {answer.describe()}")
            return
        body = response.json()
        problem: Mismatch | str | None
        if kind == "preview":
            problem = preview_problem(expected, body)
        elif kind == "run":
            problem = self._run_problem(expected, body["id"])
        else:
            base = self.defaults if kind == "job" else self.jobs[job_id]
            problem = self._job_problem(merged(base, self.defaults, expected), body)
        if problem is not None:
            kind = problem.kind if isinstance(problem, Mismatch) else "round trip"
            self.tally.violation(kind, f"{problem}: {answer.describe()}")

    def _job_problem(self, expected: dict[str, Any], body: dict[str, Any]) -> Mismatch | None:
        kept = self.client.get(f"/api/v1/jobs/{body['id']}").json().get("definition")
        self.jobs[body["id"]] = body["definition"]
        if not same(kept, body["definition"]):
            return Mismatch("the definition in the log", body["definition"], kept)
        return difference(expected, body["definition"], "definition")

    def _run_problem(self, expected: dict[str, Any], execution_id: str) -> str | None:
        events = self.client.get(f"/api/v1/executions/{execution_id}/events").json()
        spec = events[0]["data"]["spec"]
        if not same(spec["payload"], expected.get("payload", {})):
            return f"the log holds the payload {spec['payload']!r}"
        if spec["handler"] != expected["handler"]:
            return f"the log holds the handler {spec['handler']!r}"
        return None

    def read_models_problems(self) -> list[str]:
        """Where the read models' jobs differ from what was accepted (once caught up)."""
        rows: dict[str, dict[str, Any]] = {}
        while True:
            page = self.client.get("/api/v1/jobs", params={"limit": PAGE, "offset": len(rows)})
            items = page.json()["items"]
            rows |= {row["id"]: row for row in items}
            if len(items) < PAGE:
                break
        found = []
        for job_id, definition in self.jobs.items():
            row = rows.get(job_id)
            kept = None if row is None else row["definition"]
            if kept is None or kept["name"] != definition["name"]:
                found.append(f"job {job_id}: the read model holds {kept!r}")
            elif not same(kept["payload"], definition["payload"]):
                found.append(f"job {job_id}: the read model's payload is {kept['payload']!r}")
        return found


def run_definitions(
    target: Target,
    role: Role,
    payload: st.SearchStrategy[dict[str, Any]],
    *,
    examples: int,
    until: float,
) -> tuple[Tally, Session]:
    """Rounds of ``examples`` inputs until the monotonic time ``until`` (at least one)."""
    tally = Tally("definitions", str(role))
    session = Session(target, role, tally)
    begun = time.monotonic()
    session.start()

    @settings(examples)
    @hypothesis.given(
        drawn=drawn(inputs.payloads(payload)), ascii_only=st.booleans(), pick=st.integers(0, 999)
    )
    def check(drawn: tuple[str, Any], ascii_only: bool, pick: int) -> None:
        tally.cases += 1
        session.send(*drawn, ascii_only=ascii_only, pick=pick)

    rounds(check, until, tally, examples)
    tally.seconds = time.monotonic() - begun
    return tally, session


# ---- what an accepted input must read back as ------------------------------------------


# What a recurring schedule's fields are when they are not sent.
RULE_DEFAULTS: Final = {
    "timezone": "UTC",
    "jitter_seconds": 0,
    "start_at": None,
    "end_at": None,
    "exclude_dates": [],
    "calendars": [],
}
SCHEDULE_DEFAULTS: Final = {
    "cron": RULE_DEFAULTS,
    "interval": RULE_DEFAULTS | {"offset_seconds": 0},
}
_TIMES: Final = (".run_at", ".start_at", ".end_at")


def merged(base: dict[str, Any], defaults: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """The definition ``sent`` asks for over ``base``: a field sent replaces it whole; an
    object field (retry, a schedule's zone and rules) takes the defaults for what it
    leaves out."""
    result = base | sent
    if "retry" in sent:
        result["retry"] = defaults["retry"] | sent["retry"]
    schedule = result.get("schedule")
    if isinstance(schedule, dict) and schedule.get("kind") in SCHEDULE_DEFAULTS:
        result["schedule"] = SCHEDULE_DEFAULTS[schedule["kind"]] | schedule
    return result


def same(left: Any, right: Any) -> bool:
    """Equal as JSON values of the same types: 1, 1.0 and true differ; so do 0.0 and -0.0."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float):
        return left == right and math.copysign(1, left) == math.copysign(1, right)
    return bool(left == right)


def difference(expected: Any, actual: Any, where: str) -> Mismatch | None:
    """Where an accepted definition does not read back as sent. Outside the payload, a
    number may come back as int or float, a time with another offset, and a duration
    rounded to the microsecond."""
    if where.endswith(".payload"):
        return None if same(expected, actual) else Mismatch(where, expected, actual)
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return Mismatch(f"{where} (fields)", sorted(expected), sorted(actual))
        found = (difference(expected[k], actual[k], f"{where}.{k}") for k in expected)
        return next((problem for problem in found if problem is not None), None)
    if where.endswith(_TIMES) and isinstance(expected, str) and isinstance(actual, str):
        equal = datetime.fromisoformat(expected) == datetime.fromisoformat(actual)
    elif where.endswith("_seconds") and _number(expected) and _number(actual):
        # A duration is kept to the microsecond.
        equal = timedelta(seconds=expected).total_seconds() == actual
    elif _number(expected) and _number(actual):
        equal = float(expected) == float(actual)
    else:
        equal = same(expected, actual)
    return None if equal else Mismatch(where, expected, actual)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def preview_problem(sent: dict[str, Any], body: dict[str, Any]) -> str | None:
    """Why a preview's fires are not at most ``count`` instants, rising, after ``after``."""
    ats = [datetime.fromisoformat(fire["at"]) for fire in body["fires"]]
    after = sent.get("after")
    schedule = sent["schedule"]
    recurring = schedule.get("kind") in SCHEDULE_DEFAULTS
    zone = schedule.get("timezone", "UTC") if recurring else "UTC"
    if len(ats) > sent.get("count", DEFAULT_FIRES):
        return f"{len(ats)} fires, more than asked for"
    if any(later <= earlier for earlier, later in itertools.pairwise(ats)):
        return "the fires do not rise"
    if ats and isinstance(after, str) and ats[0] <= datetime.fromisoformat(after):
        return f"the first fire {ats[0]} is not after {after}"
    if body["timezone"] != zone:
        return f"the preview is in {body['timezone']}, not {zone}"
    return None
