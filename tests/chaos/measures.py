"""The figures of a fault run: what was injected, what jobledger did, how fast it
recovered, and how late it was when nothing was broken.

- recovery per fault kind: from a fault's end to the first fire or lease after it;
- lateness outside fault windows: of fires (from the occurrence to its ``JobFired``)
  and of starts (from ``ready_at`` to the lease), counting only those due away from
  every fault (from a second before it began to ``MARGIN`` after it ended).
"""

import bisect
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from tests.chaos.checker import Verdict
from tests.chaos.folds import fold_streams
from tests.chaos.history import Fault, History

MARGIN = timedelta(seconds=5)
_BEFORE = timedelta(seconds=1)


@dataclass(frozen=True)
class KindRow:
    kind: str
    faults: int
    recovery_p50_s: float | None
    recovery_max_s: float | None


@dataclass(frozen=True)
class Figure:
    figure: str
    value: str


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (None when there is nothing to rank)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def recovery(history: History) -> dict[str, list[float]]:
    """Per fault kind, the seconds from each fault's end to the next fire or lease."""
    moments = sorted(e.at for e in history.events if e.type in {"JobFired", "ExecutionLeased"})
    found: dict[str, list[float]] = {}
    for fault in history.faults:
        index = bisect.bisect_right(moments, fault.end)
        if index < len(moments):
            found.setdefault(fault.kind, []).append((moments[index] - fault.end).total_seconds())
    return found


def kind_rows(history: History) -> list[KindRow]:
    counted = Counter(fault.kind for fault in history.faults)
    times = recovery(history)
    rows = []
    for kind, n in sorted(counted.items()):
        seconds = times.get(kind, [])
        p50, longest = percentile(seconds, 0.5), max(seconds, default=None)
        rows.append(KindRow(kind, n, _rounded(p50), _rounded(longest)))
    return rows


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _quiet(moment: datetime, faults: Sequence[Fault]) -> bool:
    return not any(f.start - _BEFORE <= moment <= f.end + MARGIN for f in faults)


def lateness(history: History) -> dict[str, list[float]]:
    """Seconds late, of fires and of starts due outside every fault window."""
    fires = [
        (e.at - e.data["scheduled_for"]).total_seconds()
        for e in history.events
        if e.type == "JobFired" and _quiet(e.data["scheduled_for"], history.faults)
    ]
    runs, _ = fold_streams(history.events, lambda _: None, None, history.injected)
    starts = [
        (lease.at - lease.ready_at).total_seconds()
        for run in runs.values()
        for lease in run.leases
        if _quiet(lease.ready_at, history.faults)
    ]
    return {"fire": fires, "start": starts}


def figures(history: History, verdict: Verdict, counts: Mapping[str, int]) -> list[Figure]:
    """The summary: executions, duplicates turned away, duplicated side effects,
    lost runs, violations, and lateness away from faults."""
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(verdict.statuses.items()))
    keyed = [a for a in history.accepted if a.key is not None and a.kind != "job"]
    repeats = len(keyed) - len({a.key for a in keyed})
    rows = [
        ("faults injected", f"{len(history.faults)}"),
        ("executions", f"{sum(verdict.statuses.values())} ({statuses})"),
        ("handler invocations / leases recorded", f"{verdict.invocations} / {verdict.attempts}"),
        ("duplicates rejected: repeated idempotency keys", f"{repeats}"),
        ("duplicates rejected: fire conflicts", f"{counts.get('scheduler.fire_conflict', 0)}"),
        ("duplicates rejected: stale reports", f"{counts.get('worker.stale_report', 0)}"),
        ("duplicates rejected: leases refused", f"{counts.get('worker.lease_refused', 0)}"),
        ("duplicated side effects", f"{sum(d.effects - 1 for d in verdict.duplicates)}"),
        ("lost (must be 0)", f"{len(verdict.lost)}"),
        ("invariant violations (must be 0)", f"{len(verdict.violations)}"),
        ("roles that exited by themselves", f"{len(history.exits)}"),
        ("role starts refused (a store down)", f"{counts.get('start refused (store down)', 0)}"),
    ]
    for kind, values in lateness(history).items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        shown = "-" if p50 is None or p99 is None else f"{p50 * 1000:.0f} / {p99 * 1000:.0f} ms"
        rows.append((f"{kind} lateness p50 / p99 outside faults ({len(values)})", shown))
    return [Figure(name, value) for name, value in rows]


def causes(verdict: Verdict) -> Counter[str]:
    """Duplicated side effects by cause (each extra copy counted once)."""
    counted: Counter[str] = Counter()
    for duplicate in verdict.duplicates:
        for cause in duplicate.cause.split("; "):
            counted[cause] += 1
    return counted


def document(history: History, verdict: Verdict, counts: Mapping[str, int]) -> dict[str, Any]:
    """Everything above, and the violations, as JSON-ready values."""
    return {
        "faults": [asdict(row) for row in kind_rows(history)],
        "figures": {f.figure: f.value for f in figures(history, verdict, counts)},
        "duplicated_side_effects": dict(causes(verdict)),
        "violations": [str(v) for v in verdict.violations],
        "counts": dict(counts),
        "lateness_s": {k: sorted(v) for k, v in lateness(history).items()},
    }
