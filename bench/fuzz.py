"""Fuzz campaign: the test suite's campaign against a live API, for as long as asked.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off), serves the API over them from this process (uvicorn
on a free port, with the projector) and runs the campaign of
``tests/integration/api/fuzz_campaign.py``: Schemathesis stateful runs as a viewer, an
operator and an admin, hypothesis definitions at the codec's edges as an operator,
ad-hoc runs at the edges (one, unique, batch, outbox rows through the relay), bursts
against small budgets of a second app, then the followers' check. The time is shared
evenly between the six parts; each repeats
rounds until its share is used. Stops the server and drops the database at the end,
also on an error or Ctrl-C.

    python -m bench.fuzz [--minutes N] [--admin-url URL]

Prints a table (inputs tried, statuses seen and violations per part and role), the
violations found, and writes the same as JSON to ``bench/results/fuzz.json``. Exits 1
when a violation was found.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.conftest import JsonValues, LiveServer
from tests.integration.api.conftest import serve_api
from tests.integration.api.fuzz_campaign import (
    Budget,
    Outcome,
    campaign_target,
    run_campaign,
    usual_payloads,
)

from bench import _support as support
from jobledger.adapters.store import migrate
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path

    from tests.integration.api.fuzz_checks import Tally

# Per round: as many as the test suite runs once.
ROUND = Budget(scenarios=40, steps=15, definitions=300, runs=100, bursts=1)
SHOWN_VIOLATIONS = 20
COLUMNS = (
    ("part", "{:<12}"),
    ("role", "{:<9}"),
    ("inputs", "{:>7}"),
    ("cases", "{:>6}"),
    ("seconds", "{:>8}"),
    ("links", "{:>6}"),
    ("violations", "{:>10}"),
    ("statuses", "{}"),
)


@dataclass(frozen=True)
class Row:
    part: str
    role: str
    inputs: int
    cases: int
    seconds: float
    links: int  # stateful steps that followed an OpenAPI link
    violations: int
    statuses: str


def row(tally: Tally) -> Row:
    statuses = " ".join(f"{code}:{count}" for code, count in sorted(tally.statuses.items()))
    return Row(
        tally.part,
        tally.role,
        tally.inputs,
        tally.cases,
        tally.seconds,
        sum(tally.links.values()),
        sum(tally.violations.values()),
        statuses,
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument(
        "--minutes", type=float, default=5.0, help="how long the campaign runs (default 5)"
    )
    return parser.parse_args(argv)


def campaign(args: argparse.Namespace) -> Outcome:
    budget = Budget(
        scenarios=ROUND.scenarios,
        steps=ROUND.steps,
        definitions=ROUND.definitions,
        runs=ROUND.runs,
        bursts=ROUND.bursts,
        seconds=args.minutes * 60,
    )
    with (
        support.throwaway_postgres(args.admin_url) as url,
        support.private_redis() as redis_url,
    ):
        settings = load_settings({}, database_url=url, log_level="error")
        migrate(settings, progress=lambda _: None)
        configure_logging(settings)
        with serve_api(url, redis_url, LiveServer, log_level="error") as api:
            support.log(f"API up at {api.url}; {args.minutes:g} minutes of fuzzing")
            target = campaign_target(api.container, api.url, api.tokens)
            try:
                payloads = usual_payloads(JsonValues)
                return run_campaign(
                    api.container, target, payloads, budget, LiveServer, progress=support.log
                )
            finally:
                target.probe.close()


def report(outcome: Outcome, args: argparse.Namespace, elapsed: float) -> Path:
    print(support.format_table([row(t) for t in outcome.tallies], COLUMNS))
    violations = outcome.violations()
    print(f"\n{outcome.count()} violations" + (":" if violations else ""))
    for text in violations[:SHOWN_VIOLATIONS]:
        print(f"  {text[:400]}")
    known = {f"{t.part}/{t.role}": dict(t.known) for t in outcome.tallies if t.known}
    if known:
        print(f"documented behaviour Schemathesis flags (not violations): {known}")
    return support.write_json(
        "fuzz",
        {
            "recorded_at": support.recorded_at(),
            **support.machine(),
            "minutes": args.minutes,
            "run_time_s": round(elapsed, 1),
            "inputs": sum(t.inputs for t in outcome.tallies),
            "violations": outcome.count(),
            "parts": [t.as_json() for t in outcome.tallies],
        },
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    begun = time.perf_counter()
    try:
        outcome = campaign(args)
    except KeyboardInterrupt:
        support.log("interrupted; the server and redis-server were stopped, the database dropped")
        return 130
    elapsed = time.perf_counter() - begun
    path = report(outcome, args, elapsed)
    print(f"\nrun time {elapsed:.0f} s; JSON: {path}")
    return 1 if outcome.count() else 0


if __name__ == "__main__":
    sys.exit(main())
