"""The stateful part of the fuzz campaign: Schemathesis follows the OpenAPI links (create
a job, trigger it, cancel the run; list the dead letters, requeue one...) as one role,
and every step is checked by ``fuzz_checks`` besides Schemathesis's own checks."""

import json
import re
import time
import urllib.parse
import uuid
from typing import Any

import requests
import schemathesis
from schemathesis.checks import CheckFunction, positive_data_acceptance
from schemathesis.core.failures import AcceptedNegativeData, Failure, FailureGroup
from schemathesis.core.transport import Response
from schemathesis.generation.stateful.state_machine import (
    RecordingStateMachine,
    StepInput,
    StepOutput,
)
from schemathesis.openapi.checks import EnsureResourceAvailability, UseAfterFree
from tests.integration.api.fuzz_checks import (
    Answer,
    CrashError,
    Tally,
    Target,
    check_answer,
    rounds,
    settings,
)
from tests.integration.api.test_route_roles import STREAMS

from jobledger.domain.roles import Role
from jobledger.services.waits import MAX_WAIT_SECONDS

# Schemathesis would flag every refusal of a schema-valid body (a cron that never fires,
# a role too low for the route), which the schema cannot express.
EXCLUDED_CHECKS = [positive_data_acceptance]
FAILURE_TEXT = 300  # characters of a Schemathesis failure quoted in a violation
_RETYPED = re.compile(r"became (number|integer|boolean)\)")
_IN_QUERY = re.compile(r"\bin query\b")
# Path parameters that would let the campaign revoke or demote its own credentials.
_ACCOUNT_IDS = ("user_id", "token_id")
# A long-poll answers after up to MAX_WAIT_SECONDS when nothing happens (no worker runs
# in the campaign): the campaign waits at most this long, so that it spends its time on
# other calls, and its client waits out the server's bound before calling it a crash.
_LONGEST_WAIT = 1.0
_CALL_TIMEOUT = MAX_WAIT_SECONDS + 15
# The schema cannot say which handlers are registered, which names a job takes or which
# crons ever fire, so few generated bodies would create anything, and the links from a
# created job (trigger, pause, delete) or run (cancel) would hardly be followed. Every
# other schema-valid body of these operations is therefore a valid one carrying the
# generated values of the fields the schema does describe in full.
VALID_BODIES: dict[tuple[str, str], tuple[dict[str, Any], tuple[str, ...]]] = {
    ("POST", "/api/v1/jobs"): (
        {"name": "fuzzed job", "handler": "test.echo"},
        ("payload", "description", "misfire", "overlap"),
    ),
    ("POST", "/api/v1/executions"): ({"handler": "test.echo"}, ("payload",)),
    ("POST", "/api/v1/workflows"): (
        {"steps": [{"name": "first", "handler": "test.echo"}]},
        ("name", "on_failure"),
    ),
}


def _shorten_wait(case: schemathesis.Case[Any]) -> None:
    wait = (case.query or {}).get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > _LONGEST_WAIT:
        case.query["wait"] = _LONGEST_WAIT


class Checked(RecordingStateMachine):
    """The campaign's steps: sent as one role, each checked, every failure tallied.
    Mixed into the machine Schemathesis builds from the live document (``machine``)."""

    target: Target
    role: Role
    tally: Tally

    def before_call(self, case: schemathesis.Case[Any]) -> None:
        super().before_call(case)
        for name in _ACCOUNT_IDS:
            if str(case.path_parameters.get(name)) in self.target.protected:
                case.path_parameters[name] = str(uuid.uuid4())
        self._mend(case)
        _shorten_wait(case)
        self.before = self.target.probe.snapshot()

    def _mend(self, case: schemathesis.Case[Any]) -> None:
        valid = VALID_BODIES.get((case.operation.method.upper(), case.operation.path))
        positive = case.meta is not None and case.meta.generation.mode.is_positive
        if valid is None or not positive or not isinstance(case.body, dict):
            return
        self.mended = getattr(self, "mended", 0) + 1
        if self.mended % 2:
            base, kept = valid
            case.body = base | {k: v for k, v in case.body.items() if k in kept}

    def get_call_kwargs(self, case: schemathesis.Case[Any]) -> dict[str, Any]:
        del case  # the same for every step
        return {"headers": self.target.headers(self.role), "timeout": _CALL_TIMEOUT}

    def call(self, case: schemathesis.Case[Any], **kwargs: Any) -> Response:
        try:
            return super().call(case, **kwargs)
        except requests.RequestException as error:
            self.tally.violation("crash", f"{case.operation.label}: {type(error).__name__}")
            raise CrashError from error

    def after_call(self, response: Response, case: schemathesis.Case[Any]) -> None:
        super().after_call(response, case)
        after = self.target.probe.snapshot()
        check_answer(
            self.target,
            self.tally,
            self.role,
            answer(response, case),
            before=self.before,
            after=after,
        )

    def validate_response(
        self,
        response: Response,
        case: schemathesis.Case[Any],
        additional_checks: list[CheckFunction] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            case.validate_response(
                response,
                additional_checks=additional_checks,
                excluded_checks=EXCLUDED_CHECKS,
                transport_kwargs=kwargs or None,
                recorder=self.recorder,
            )
        except FailureGroup as failures:
            for failure in failures.exceptions:
                self._tally_failure(failure, case, response)

    def _tally_failure(
        self, failure: Exception, case: schemathesis.Case[Any], response: Response
    ) -> None:
        kind, documented = classify(failure, case, response)
        if documented:
            self.tally.known[kind] += 1
            return
        text = " ".join(str(failure).split())
        if isinstance(failure, Failure):
            text = " ".join(f"{failure.title}: {failure.message}".split())
        sent = answer(response, case).describe()
        self.tally.violation(kind, f"{text[:FAILURE_TEXT]}: {sent}")

    def step(self, input: StepInput) -> StepOutput:  # noqa: A002 (the base's name)
        if input.transition is not None:
            self.tally.links[input.transition.id] += 1
        return super().step(input)

    def teardown(self) -> None:
        self.tally.cases += 1
        super().teardown()


def machine(target: Target, role: Role, tally: Tally) -> type[Checked]:
    """A state machine over the live document whose steps are sent as ``role``."""
    document = schemathesis.openapi.from_url(f"{target.url}/schema/openapi.json")
    # A stream does not end: its own tests cover it.
    built = document.exclude(path=list(STREAMS)).as_state_machine()
    fields = {"target": target, "role": role, "tally": tally}
    return type(f"Campaign{role.title()}", (Checked, built), fields)


def classify(
    failure: Exception, case: schemathesis.Case[Any], response: Response
) -> tuple[str, bool]:
    """A Schemathesis failure's kind, and whether the API documents it as intended."""
    path = case.operation.path
    if isinstance(failure, EnsureResourceAvailability) and b"not in the read model yet" in (
        response.content
    ):
        # docs/api.md: an execution read a moment after it was created may answer 404.
        return "read model lag", True
    if isinstance(failure, UseAfterFree):
        if path == "/api/v1/jobs/{job_id}/preview" and _lists_fires(response):
            return "preview after delete", False
        if path.startswith(("/api/v1/jobs/{job_id}", "/api/v1/executions/{execution_id}")):
            # docs/api.md: a deleted job, a discarded dead letter keep their history.
            return "history after delete", True
    if isinstance(failure, AcceptedNegativeData) and _IN_QUERY.search(failure.message):
        if "became object)" in failure.message:
            # An object is sent as its keys, parameters the route does not take.
            return "unknown query parameter", False
        if _RETYPED.search(failure.message):
            return "coerced", False  # a number taken as a time: see ``fuzz_definitions``
    return "contract", False


def _lists_fires(response: Response) -> bool:
    try:
        return bool(json.loads(response.content)["fires"])
    except (ValueError, KeyError, TypeError):
        return False


def answer(response: Response, case: schemathesis.Case[Any]) -> Answer:
    sent = response.request.body
    url = urllib.parse.urlsplit(response.request.url or "")
    return Answer(
        method=case.operation.method.upper(),
        route=case.operation.path,
        path=f"{url.path}?{url.query}" if url.query else url.path,
        body=sent.encode() if isinstance(sent, str) else sent if isinstance(sent, bytes) else b"",
        status=response.status_code,
        content=response.content,
    )


def run_stateful(target: Target, role: Role, *, scenarios: int, steps: int, until: float) -> Tally:
    """Rounds of ``scenarios`` scenarios of up to ``steps`` steps, until the monotonic
    time ``until`` (at least one round); the tally of every step."""
    tally = Tally("stateful", str(role))
    begun = time.monotonic()
    campaign = machine(target, role, tally)
    chosen = settings(scenarios, stateful_step_count=steps)
    rounds(lambda: campaign.run(settings=chosen), until, tally, scenarios)
    tally.seconds = time.monotonic() - begun
    return tally
