"""The short fault run: the production roles under a mixed workload for 90 s while
every kind of fault is injected at seeded random times, several at once, and the
history checker reads the whole run.

The seed is new each time (printed, in the failure message, and in
``build/chaos/short-run.json``); ``JOBLEDGER_CHAOS_SEED=N`` replays run N.
``python -m bench.chaos`` is the long run.
"""

import json
import os
from pathlib import Path

import pytest
from tests.chaos.faults import KINDS
from tests.chaos.measures import document
from tests.chaos.run import SEED_VARIABLE, SHORT, RunResult, new_seed, run_chaos

# Seven role processes and two private servers: it runs alone, after the parallel tests.
pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "build" / "chaos" / "short-run.json"


def write_report(result: RunResult) -> Path:
    body = {"seed": result.seed, "quiesced": result.quiesced, "skipped": result.skipped}
    body |= document(result.history, result.verdict, result.counts)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(body, indent=2, default=str) + "\n", encoding="utf-8")
    return REPORT


@pytest.mark.timeout(480)
def test_a_short_fault_run_keeps_every_promise(tmp_path: Path) -> None:
    """If the api, the projector, two schedulers and three workers run a mixed workload
    on a private Redis and PostgreSQL while each kind of fault is injected (kill -9 of
    each role, SIGSTOP of the leader and of a worker past their ttl, Redis FLUSHALL,
    kill -9 and SIGSTOP, PostgreSQL kill -9 and SIGSTOP, terminated connections, a
    worker clock off, a poison run, an unprojectable event), then after quiescence
    nothing is lost, the checker finds no violation, and no role exited by itself."""
    seed = int(os.environ.get(SEED_VARIABLE) or new_seed())
    replay = f"seed {seed} (replay with {SEED_VARIABLE}={seed})"
    print(f"chaos {replay}")  # noqa: T201 (the seed shows with -rP and -s)
    try:
        result = run_chaos(seed, SHORT, tmp_path / "run")
    except (Exception, pytest.fail.Exception) as error:  # noqa: BLE001 (any failure names its seed)
        pytest.fail(f"{replay}: the run broke off: {type(error).__name__}: {error}")
    report = write_report(result)
    verdict = result.verdict
    print(f"chaos {replay}: {len(verdict.violations)} violation(s), report {report}")  # noqa: T201 (as above)
    listed = "\n".join(str(v) for v in verdict.violations[:40])
    assert not verdict.lost, f"{replay}: {len(verdict.lost)} lost; report {report}\n{listed}"
    assert not verdict.violations, f"{replay}: violations; report {report}\n{listed}"
    assert result.quiesced, f"{replay}: not quiescent within the bound; report {report}"
    injected = {fault.kind for fault in result.history.faults}
    assert set(KINDS) <= injected, (
        f"{replay}: not injected {set(KINDS) - injected}: {result.skipped}"
    )
