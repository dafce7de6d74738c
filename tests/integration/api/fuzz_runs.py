"""The runs part of the fuzz campaign: hypothesis sends ad-hoc runs at the edges
(``fuzz_inputs.runs``: instants at both ends of the range at -14:00 and +14:00, delays,
priorities, timeouts, expiries before and after the start, huge and deep payloads,
NUL characters, unknown handlers and queues) every way a run comes in: one at a time
(with and without ``unique``), in a batch beside usual runs, and as an outbox row the
relay takes, as ``enqueue_in_transaction`` writes it.

A refusal names its field and writes nothing to the log (a refused outbox row too);
an accepted run reads back from ``GET /api/v1/executions/{id}`` and its events with
the values sent, and the executions list still answers 200 after it.
"""

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import httpx
import hypothesis
import msgspec
import psycopg
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
from tests.integration.api.fuzz_definitions import same

from jobledger.bootstrap import Container, build_services
from jobledger.domain.ids import trigger_execution_id
from jobledger.domain.instants import EARLIEST, LATEST, RANGE_TEXT
from jobledger.domain.roles import Role
from jobledger.infra.outages import POSTGRESQL
from jobledger.runtime.relay import relay_part
from jobledger.schemas.outbox import OUTBOX_CHANNEL, OUTBOX_INSERT, OUTBOX_TABLE

RUN: Final = ("POST", "/api/v1/executions")
BATCH: Final = ("POST", "/api/v1/executions:batch")
JSON: Final = {"Content-Type": "application/json"}
READ_BACK_SECONDS: Final = 10.0  # for the projector to show a run, the relay to take a row
POLL: Final = 0.02
USUAL_RUNS: Final = 3  # beside the drawn one in a batch
_ROW: Final = f"SELECT refused FROM {OUTBOX_TABLE} WHERE idempotency_key = %s"  # noqa: S608 (constant names)
_NOTIFY: Final = f"NOTIFY {OUTBOX_CHANNEL}"


class Runs:
    """An operator's runs against the API and the outbox, and what each got."""

    def __init__(self, container: Container, target: Target, api: Tally, outbox: Tally) -> None:
        self.target, self.api, self.outbox = target, api, outbox
        self.role = Role.OPERATOR
        self.client = httpx.Client(
            base_url=target.url, headers=target.headers(self.role), timeout=30
        )
        self.database = psycopg.connect(container.settings.database_url, autocommit=True)

    def close(self) -> None:
        self.client.close()
        self.database.close()

    # ---- over the API ----------------------------------------------------------------

    def send(self, route: tuple[str, str], value: Any, *, ascii_only: bool) -> None:
        sent = value if isinstance(value, bytes) else inputs.encode(value, ascii_only=ascii_only)
        method, path = route
        before = self.target.probe.snapshot()
        try:
            response = self.client.request(method, path, content=sent, headers=JSON)
        except httpx.TransportError as error:
            self.api.violation("crash", f"{method} {path}: {type(error).__name__}")
            raise CrashError from error
        answer = Answer(method, path, path, sent, response.status_code, response.content)
        after = self.target.probe.snapshot()
        check_answer(self.target, self.api, self.role, answer, before=before, after=after)
        if 400 <= response.status_code < 500:
            self._named(self.api, answer, response)
        elif response.is_success:
            self._accepted(inputs.read(sent), answer, response.json())

    def _named(self, tally: Tally, answer: Answer, response: httpx.Response) -> None:
        """A refused input names its field (a refusal of the request as a whole, say
        too many requests, need not)."""
        try:
            error = response.json().get("error", {})
        except ValueError:
            return  # the shape check has recorded it
        tally.refused[str(error.get("field") or error.get("code"))] += 1
        if response.status_code in {400, 422} and not error.get("field"):
            tally.violation("no field", f"a refusal that names no field: {answer.describe()}")

    def _accepted(self, sent: Any, answer: Answer, body: dict[str, Any]) -> None:
        if not isinstance(sent, dict):
            self.api.violation("accepted", f"not a JSON object: {answer.describe()}")
            return
        if "runs" in body or "executions" in body:
            pairs = list(zip(sent.get("runs", []), body.get("executions", []), strict=False))
        else:
            pairs = [(sent, body)]
        for run, ref in pairs:
            # A duplicate of a unique run is that run, with its own values.
            expected = None if ref.get("duplicate") else run
            self.read_back(self.api, expected, ref["id"], answer.describe())

    # ---- over the outbox ---------------------------------------------------------------

    def enqueue_row(self, value: Any) -> None:
        """``value`` as an outbox row's run, committed as ``enqueue_in_transaction``
        commits it; then what the relay made of it."""
        text = value if isinstance(value, bytes) else inputs.encode(value, ascii_only=True)
        run = text.decode("utf-8", errors="replace").replace("\x00", "\\u0000")
        key = uuid.uuid4().hex
        before = self.target.probe.snapshot()
        with self.database.transaction():
            self.database.execute(OUTBOX_INSERT, (key, run))
            self.database.execute(_NOTIFY)
        refused = self._relayed(key)
        after = self.target.probe.snapshot()
        self.outbox.inputs += 1
        described = f"outbox row {key} {run[:300]!r}"
        if refused is _STALLED:
            self.outbox.statuses[0] += 1
            self.outbox.violation(
                "stalled relay", f"not taken in {READ_BACK_SECONDS:g} s: {described}"
            )
            return
        if refused is not None:
            self.outbox.statuses[422] += 1
            self.outbox.refused[str(refused).partition(":")[0][:40]] += 1
            if after.head != before.head:
                moved = f"the log head moved from {before.head} to {after.head}"
                self.outbox.violation("write on refusal", f"{moved}: {described}: {refused}")
            return
        self.outbox.statuses[202] += 1
        expected = inputs.read(text)
        if not isinstance(expected, dict):
            self.outbox.violation("accepted", f"not a JSON object: {described}")
            return
        execution_id = str(trigger_execution_id(None, key))
        self.read_back(self.outbox, expected, execution_id, described)

    def _relayed(self, key: str) -> object:
        """None once the relay took the row, its error if it refused it, ``_STALLED``."""
        deadline = time.monotonic() + READ_BACK_SECONDS
        while time.monotonic() < deadline:
            row = self.database.execute(_ROW, (key,)).fetchone()
            if row is None:
                return None
            if row[0] is not None:
                return str(row[0])
            time.sleep(POLL)
        return _STALLED

    # ---- reading an accepted run back ------------------------------------------------

    def read_back(self, tally: Tally, sent: dict[str, Any] | None, run_id: str, what: str) -> None:
        """The run as the read model shows it once caught up, its spec as the log holds
        it, and the executions list after it."""
        shown = self._shown(run_id)
        if shown is None:
            tally.violation(
                "read back", f"GET /api/v1/executions/{run_id} never answered 200: {what}"
            )
            return
        if sent is not None:
            events = self.client.get(f"/api/v1/executions/{run_id}/events").json()
            spec = events[0]["data"]["spec"]
            for problem in run_problems(sent, shown, spec):
                tally.violation("round trip", f"{problem}: {what}")
        listed = self.client.get("/api/v1/executions", params={"limit": 50})
        if listed.status_code != 200:
            tally.violation("list", f"GET /api/v1/executions -> {listed.status_code}: {what}")

    def _shown(self, run_id: str) -> dict[str, Any] | None:
        deadline = time.monotonic() + READ_BACK_SECONDS
        while time.monotonic() < deadline:
            got = self.client.get(f"/api/v1/executions/{run_id}")
            if got.status_code == 200:
                execution: dict[str, Any] = got.json()["execution"]
                return execution
            if got.status_code != 404:
                return None
            time.sleep(POLL)
        return None


_STALLED: Final = object()
SPEC_DEFAULTS: Final = {"queue": "default", "payload": {}}
# The read models keep times to the millisecond; the log keeps them whole.
MILLISECOND: Final = timedelta(milliseconds=1)


def run_problems(
    sent: dict[str, Any], shown: dict[str, Any], spec: dict[str, Any]
) -> Iterator[str]:
    """Where a run reads back otherwise than it was sent: a time taken outside the
    range, the row's handler, queue, priority and start; the log's payload, timeout
    and expiry."""
    expected = SPEC_DEFAULTS | sent
    for name in ("handler", "queue"):
        if shown[name] != expected[name]:
            yield f"{name} is {shown[name]!r}, not {expected[name]!r}"
    if "priority" in sent and shown["priority"] != sent["priority"]:
        yield f"priority is {shown['priority']!r}, not {sent['priority']!r}"
    yield from _time_problems(sent, shown, spec)
    if not same(spec["payload"], expected["payload"]):
        yield f"the log holds the payload {str(spec['payload'])[:200]}"
    if "timeout_seconds" in sent:
        timeout = msgspec.convert(spec["timeout"], timedelta, strict=False)
        if timeout != timedelta(seconds=sent["timeout_seconds"]):
            yield f"timeout is {timeout}, not {sent['timeout_seconds']} s"


def _time_problems(
    sent: dict[str, Any], shown: dict[str, Any], spec: dict[str, Any]
) -> Iterator[str]:
    for name in ("run_at", "expires_at"):
        if name in sent and not _in_range(sent[name]):
            yield f"{name} {sent[name]!r} was taken, outside {RANGE_TEXT}"
    if "run_at" in sent and not _same_instant(shown["ready_at"], sent["run_at"], MILLISECOND):
        yield f"ready_at is {shown['ready_at']!r}, not run_at {sent['run_at']!r}"
    if "expires_at" in sent and not _same_instant(spec.get("expires_at"), sent["expires_at"]):
        yield f"expires_at is {spec.get('expires_at')!r}, not {sent['expires_at']!r}"


def _in_range(sent: Any) -> bool:
    try:
        return EARLIEST <= datetime.fromisoformat(sent) <= LATEST
    except (TypeError, ValueError, OverflowError):
        return False


def _same_instant(got: Any, sent: Any, within: timedelta = timedelta(0)) -> bool:
    """Whether two times in ISO 8601 are one instant, or less than ``within`` apart."""
    if not isinstance(got, str) or not isinstance(sent, str):
        return False
    apart = abs(datetime.fromisoformat(got) - datetime.fromisoformat(sent))
    return apart <= within if not within else apart < within


def drawn(
    payload: inputs.Field, now: datetime, payload_limit: int
) -> st.SearchStrategy[tuple[str, Any]]:
    """(way in, what to send): one run, one run with ``unique``, a batch with one drawn
    run among usual ones, an outbox row; or a body that is no run at all."""
    run = inputs.runs(payload, now, payload_limit)
    one = inputs.either(run)
    unique = st.builds(lambda body, option: body | {"unique": option}, one, inputs.uniques())
    batch = st.builds(
        lambda usual, odd, at: {"runs": [*usual[:at], odd, *usual[at:]]},
        st.lists(run.usual, min_size=1, max_size=USUAL_RUNS),
        one,
        st.integers(0, USUAL_RUNS),
    )
    raw = st.sampled_from(inputs.RAW_BODIES)
    return st.one_of(
        st.tuples(st.just("run"), one),
        st.tuples(st.just("run"), one),
        st.tuples(st.just("unique"), unique),
        st.tuples(st.just("batch"), batch),
        st.tuples(st.just("outbox"), one),
        st.tuples(st.just("outbox"), one | raw),
        st.tuples(st.sampled_from(["run", "batch"]), raw),
    )


@contextmanager
def relaying(container: Container) -> Iterator[None]:
    """The outbox relay of a scheduler, running while the block runs."""
    relay = relay_part(
        build_services(container).outbox,
        container.listen(),
        container.health.watch(POSTGRESQL),
    )
    if relay is None:
        yield
        return
    relay.start()
    try:
        yield
    finally:
        relay.stop()


def run_runs(
    container: Container,
    target: Target,
    payload: st.SearchStrategy[dict[str, Any]],
    *,
    examples: int,
    until: float,
) -> list[Tally]:
    """Rounds of ``examples`` runs until the monotonic time ``until`` (at least one)."""
    api, outbox = Tally("runs", str(Role.OPERATOR)), Tally("runs", "outbox")
    runs = Runs(container, target, api, outbox)
    begun = time.monotonic()
    now = datetime.now(tz=UTC)
    strategy = drawn(inputs.payloads(payload), now, container.settings.max_payload_bytes)
    sends: dict[str, Callable[[Any, bool], None]] = {
        "run": lambda value, ascii_only: runs.send(RUN, value, ascii_only=ascii_only),
        "unique": lambda value, ascii_only: runs.send(RUN, value, ascii_only=ascii_only),
        "batch": lambda value, ascii_only: runs.send(BATCH, value, ascii_only=ascii_only),
        "outbox": lambda value, _: runs.enqueue_row(value),
    }

    @settings(examples)
    @hypothesis.given(drawn=strategy, ascii_only=st.booleans())
    def check(drawn: tuple[str, Any], ascii_only: bool) -> None:
        kind, value = drawn
        (outbox if kind == "outbox" else api).cases += 1
        sends[kind](value, ascii_only)

    try:
        with relaying(container):
            rounds(check, until, api, examples)
    finally:
        runs.close()
    api.seconds = outbox.seconds = time.monotonic() - begun
    return [api, outbox]
