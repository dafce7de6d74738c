"""The long fault run: the production roles under faults for many minutes, then the
history checker over the whole run.

    python -m bench.chaos [--minutes 30] [--seed N] [--fault-every S] [--keep]

The same harness as the short run of the test suite (tests/chaos): an api, a
projector, two schedulers and three workers as processes on a private redis-server
and a private PostgreSQL cluster, a mixed workload through the REST API, and faults
at seeded random times, several at once. Prints its seed (``--seed`` replays it),
progress on stderr, then a table of the faults by kind with the recovery after each,
the run's figures, the duplicated side effects by cause, and the same as JSON in
bench/results/chaos.json. Exits 1 if anything was lost or any invariant broken.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.chaos.measures import causes, document, figures, kind_rows
from tests.chaos.run import RunResult, Scale, new_seed, run_chaos

from bench import _support as support

if TYPE_CHECKING:
    from collections.abc import Sequence

KIND_COLUMNS = (
    ("kind", "{:<24}"),
    ("faults", "{:>6}"),
    ("recovery_p50_s", "{:>14}"),
    ("recovery_max_s", "{:>14}"),
)
FIGURE_COLUMNS = (("figure", "{:<52}"), ("value", "{}"))
CAUSE_COLUMNS = (("cause", "{:<52}"), ("copies", "{:>6}"))


@dataclass(frozen=True)
class CauseRow:
    cause: str
    copies: int


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="the window under faults")
    parser.add_argument("--seed", type=int, help="replay this run (default: a new seed)")
    parser.add_argument(
        "--fault-every", type=float, default=12.0, help="mean seconds between faults (12)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the roles' logs and effects")
    return parser.parse_args(argv)


def report(result: RunResult, seconds: float) -> dict[str, object]:
    history, verdict = result.history, result.verdict
    print(support.format_table(kind_rows(history), KIND_COLUMNS))
    print()
    print(support.format_table(figures(history, verdict, result.counts), FIGURE_COLUMNS))
    counted = causes(verdict)
    if counted:
        rows = [CauseRow(cause, n) for cause, n in counted.most_common()]
        print()
        print(support.format_table(rows, CAUSE_COLUMNS))
    for violation in verdict.violations[:50]:
        print(f"VIOLATION {violation}")
    for skipped in result.skipped:
        print(f"not injected: {skipped}")
    body: dict[str, object] = {"seed": result.seed, "quiesced": result.quiesced}
    body["run_seconds"] = round(seconds, 1)
    body |= {"recorded_at": support.recorded_at(), **support.machine()}
    return body | document(history, verdict, result.counts)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed or new_seed()
    scale = Scale(window=args.minutes * 60, fault_every=args.fault_every)
    support.log(f"seed {seed} (replay with --seed {seed}); window {args.minutes:g} min")
    workdir = Path(tempfile.mkdtemp(prefix=f"jobledger-chaos-{seed}-"))
    started = time.monotonic()
    try:
        result = run_chaos(seed, scale, workdir, progress=support.log)
    except KeyboardInterrupt:
        support.log("interrupted; the roles and the stores were stopped")
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    body = report(result, time.monotonic() - started)
    path = support.write_json("chaos", body)
    print(f"\nseed {seed}; JSON: {path}" + (f"; logs: {workdir}" if args.keep else ""))
    return 1 if result.verdict.violations or not result.quiesced else 0


if __name__ == "__main__":
    sys.exit(main())
