"""The first hour, timed: the tutorial followed as written, block by block, in a fresh
copy of the checkout with no environment the text does not show, until the minute job
it applies has run once on its schedule.

    python -m bench.tutorial [--repeat N]

Runs what ``tests/integration/test_tutorial_as_written.py`` runs (the same reader of the
document's blocks), N times, and prints a table: how long each step of the text took a
reader, and the time from the first command to the first scheduled run. Writes the same
as JSON to ``bench/results/tutorial.json``. Needs PostgreSQL with a role for the login
user, ports 8000 and 8001 free, and the package index reachable (``pip install .``).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.integration.test_tutorial_as_written import follow_tutorial

from bench import _support as support

COLUMNS = (("line", "{:>5}"), ("step", "{:<60}"), ("seconds", "{:>8}"))


@dataclass(frozen=True)
class Step:
    line: int
    step: str
    seconds: float


def follow_once() -> tuple[list[Step], float]:
    """The tutorial's steps and their times, and the seconds to the first scheduled run."""
    with tempfile.TemporaryDirectory(prefix="jobledger-tutorial-") as folder:
        timings, first = follow_tutorial(Path(folder))
    return [Step(line, text[:60], seconds) for line, text, seconds in timings], first


def main() -> None:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--repeat", type=int, default=1, help="follow it N times (default 1)")
    args = parser.parse_args()
    firsts: list[float] = []
    runs = []
    for round_ in range(1, args.repeat + 1):
        support.log(f"following the tutorial, round {round_} of {args.repeat}")
        steps, first = follow_once()
        firsts.append(first)
        runs.append({"steps": [vars(s) for s in steps], "first_scheduled_run_seconds": first})
        print(support.format_table(steps, COLUMNS))
        print(f"first scheduled run {first:.1f} s after the first command\n")
    print(
        f"first scheduled run: median {statistics.median(firsts):.1f} s, "
        f"max {max(firsts):.1f} s over {len(firsts)} round(s) (target: under 180 s)"
    )
    path = support.write_json(
        "tutorial",
        {"recorded_at": support.recorded_at(), "machine": support.machine(), "runs": runs},
    )
    support.log(f"wrote {path}")


if __name__ == "__main__":
    main()
