"""The fuzz campaign: generated requests against a live API as each role, and the
invariants every answer keeps.

- ``stateful``, per role (viewer, operator, admin): Schemathesis follows the OpenAPI
  links between the operations (create a job, trigger it, cancel the run; list the
  dead letters, requeue one) with schema-driven and schema-breaking values.
- ``definitions``, as an operator: hypothesis sends job definitions, ad-hoc runs, job
  changes, previews and list queries at the codec's edges (``fuzz_inputs``); what is
  accepted must read back as sent.
- ``runs``, as an operator and through the outbox: hypothesis sends ad-hoc runs at the
  edges one at a time, in batches and as outbox rows the relay takes (``fuzz_runs``);
  what is accepted must read back as sent, what is refused must name its field.
- ``budgets``, against a second app whose budgets are small: bursts of reads and of
  run-creating requests; every 429 says when to come back (``fuzz_budgets``).
- ``followers``, at the end: the projections reach the head of the log within a bound,
  ``/ready`` answers 200, no event is quarantined and the queue verifies.

Every request must get no 5xx and no lost connection; a role below the route's gets
403; a refusal carries the error shape and leaves the log head and the accounts tables
as they were (``fuzz_checks``). The campaign records every violation and goes on, so
its tallies say how much was tried even when something broke.
"""

import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import httpx
from hypothesis import strategies as st
from tests.integration.api.fuzz_budgets import run_budgets
from tests.integration.api.fuzz_checks import Probe, Tally, Target, route_needs
from tests.integration.api.fuzz_definitions import Session, run_definitions
from tests.integration.api.fuzz_inputs import QUEUES
from tests.integration.api.fuzz_runs import run_runs
from tests.integration.api.fuzz_stateful import run_stateful

from jobledger.bootstrap import Container, web_app
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.execution import Execution, Trigger
from jobledger.domain.json_values import MAX_INT, MIN_INT
from jobledger.domain.policies import RetryPolicy
from jobledger.domain.roles import Role

if TYPE_CHECKING:
    from tests.conftest import JsonValues, LiveServer

SEEDED: Final = 40  # dead letters and running executions put in the log first
POLL: Final = 0.1


@dataclass(frozen=True)
class Budget:
    """How much each part tries: per round, and for how long rounds go on."""

    scenarios: int  # stateful scenarios per role and round
    steps: int  # steps per scenario, at most
    definitions: int  # definition inputs per round
    runs: int  # runs (one, batch, outbox) per round
    bursts: int  # rounds of bursts against the small budgets, at least
    seconds: float = 0.0  # the whole campaign's time; 0: one round of each part
    catch_up_seconds: float = 60.0  # how long the projections may take at the end


@dataclass
class Outcome:
    tallies: list[Tally]

    def violations(self, *, besides: Collection[str] = ()) -> list[str]:
        """Every violation quoted, but those of the kinds ``besides``."""
        return [
            f"{t.part}/{t.role}: {text}"
            for t in self.tallies
            for text in t.quoted
            if text.partition(":")[0] not in besides
        ]

    def count(self, *, besides: Collection[str] = ()) -> int:
        return sum(
            n for t in self.tallies for kind, n in t.violations.items() if kind not in besides
        )

    def tally(self, part: str, role: str) -> Tally:
        return next(t for t in self.tallies if (t.part, t.role) == (part, role))

    def summary(self) -> str:
        lines = []
        for tally in self.tallies:
            statuses = ", ".join(f"{k}: {v}" for k, v in sorted(tally.statuses.items()))
            lines.append(
                f"{tally.part}/{tally.role}: {tally.inputs} inputs in {tally.cases} cases, "
                f"{tally.seconds:.1f} s; statuses {{{statuses}}}; "
                f"violations {dict(tally.violations) or 0}"
            )
        return "\n".join(lines)


def usual_payloads(json_values: type["JsonValues"]) -> st.SearchStrategy[dict[str, Any]]:
    """Payloads of storable numbers; ``fuzz_inputs`` adds the values past the edges."""
    return json_values.payloads(
        st.integers(MIN_INT, MAX_INT), st.floats(allow_nan=False, allow_infinity=False)
    )


def campaign_target(container: Container, url: str, tokens: dict[Role, str]) -> Target:
    """The API at ``url`` over ``container``; its users' and tokens' ids are protected."""
    accounts = container.accounts()
    own = {str(user.id) for user in accounts.list_users()}
    own |= {str(token.id) for token in accounts.list_tokens(None)}
    needs = route_needs(web_app(container))
    return Target(url, tokens, Probe(container), needs, frozenset(own))


def run_campaign(
    container: Container,
    target: Target,
    payloads: st.SearchStrategy[dict[str, Any]],
    budget: Budget,
    live_server: type["LiveServer"],
    *,
    progress: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """Seed the log, run every part, then check the followers; ``live_server`` serves
    the budgets part's own app."""
    seed(container, datetime.now(tz=UTC))
    tallies = [caught_up(target, budget.catch_up_seconds, "seeded")]
    clock = _Clock(budget.seconds, parts=len(Role) + 3)
    for role in Role:
        progress(f"stateful as {role}")
        tallies.append(
            run_stateful(
                target, role, scenarios=budget.scenarios, steps=budget.steps, until=clock.next()
            )
        )
    progress("definitions as operator")
    definitions, session = run_definitions(
        target, Role.OPERATOR, payloads, examples=budget.definitions, until=clock.next()
    )
    tallies.append(definitions)
    progress("runs as operator and through the outbox")
    tallies += run_runs(container, target, payloads, examples=budget.runs, until=clock.next())
    progress("budgets")
    tallies += run_budgets(container, target, live_server, bursts=budget.bursts, until=clock.next())
    progress("followers")
    followers = caught_up(target, budget.catch_up_seconds, "campaign")
    read_back(session, definitions)
    session.close()
    tallies.append(followers)
    return Outcome(tallies)


class _Clock:
    """Deadlines that share ``seconds`` evenly between ``parts`` parts run in turn."""

    def __init__(self, seconds: float, parts: int) -> None:
        self._share = seconds / parts
        self._at = time.monotonic()

    def next(self) -> float:
        self._at = max(self._at, time.monotonic()) + self._share
        return self._at


def seed(container: Container, at: datetime) -> None:
    """Dead letters to requeue or discard and running executions to cancel, in the log
    before the parts start (no worker runs during the campaign: every write is one of
    its requests)."""
    executions = []
    for number in range(SEEDED):
        spec = ExecutionSpec(
            handler="test.echo",
            payload={"seeded": number},
            queue=QUEUES[number % len(QUEUES)],
            retry=RetryPolicy(max_retries=0),
        )
        execution = Execution.enqueue(spec=spec, ready_at=at, trigger=Trigger.ADHOC)
        lease_id = uuid.uuid4()
        execution.lease(
            worker_id="seed", lease_id=lease_id, lease_expires_at=at + timedelta(days=1)
        )
        if number % 2 == 0:
            execution.fail(lease_id=lease_id, error=f"seeded failure {number}", at=at)
        executions.append(execution)
    container.ledger.save_all(*executions)


def caught_up(target: Target, bound: float, when: str) -> Tally:
    """The projections at the head of the log within ``bound`` seconds, /ready at 200,
    nothing quarantined, the queue equal to a fold of the log."""
    tally = Tally("followers", when)
    begun = time.monotonic()
    with httpx.Client(base_url=target.url, headers=target.headers(Role.ADMIN), timeout=30) as admin:
        lag = _wait_for_followers(admin, begun + bound)
        if lag:
            tally.violation("stalled follower", f"still behind after {bound:g} s: {lag}")
        ready = admin.get("/ready")
        tally.statuses[ready.status_code] += 1
        if ready.status_code != 200:
            tally.violation("not ready", ready.text[:300])
        elif quarantined := ready.json().get("quarantined"):
            events = admin.get("/api/v1/admin/quarantine").text[:300]
            tally.violation("quarantined", f"{quarantined} events: {events}")
        verify = admin.get("/api/v1/admin/queue/verify").json()
        if not verify.get("ok"):
            tally.violation("queue verify", str(verify)[:300])
    tally.inputs, tally.seconds = 1, time.monotonic() - begun
    return tally


def _wait_for_followers(admin: httpx.Client, deadline: float) -> dict[str, int]:
    """Wait until no rebuild runs and no projection lags; what still lags at ``deadline``."""
    while True:
        rebuild = admin.get("/api/v1/admin/queue/rebuild").json()
        lag = admin.get("/api/v1/metrics/system").json()["projection_lag"]
        behind = {name: count for name, count in lag.items() if count}
        if rebuild.get("state") == "running":
            behind["rebuild"] = rebuild.get("done", 0)
        if not behind or time.monotonic() > deadline:
            return behind
        time.sleep(POLL)


def read_back(session: Session, tally: Tally) -> None:
    """The jobs the definitions part got accepted, as the read models hold them."""
    for problem in session.read_models_problems():
        tally.violation("round trip", f"read model: {problem}")
