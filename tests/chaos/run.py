"""One fault run, from its seed to its verdict.

The deployment starts; the workload creates its jobs; for the window, the workload
runs while the injector breaks things. Then the faults are undone, what is unanswered
is sent again, the run settles (every role up, a leader, a few quiet seconds) and the
cron jobs are paused; once every execution has ended and the projections have caught
up (or the bound has passed), the history is read back from the stores and checked.
The seed decides the plan of faults and the workload; a run with the same seed makes
the same requests and the same faults at the same times (what the processes do in
between is up to them).
"""

import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from tests.chaos.checker import Verdict, check
from tests.chaos.deployment import MISFIRE_GRACE, ChaosDeployment
from tests.chaos.faults import Injector, Watch, plan_faults
from tests.chaos.history import History, Views, read_effects, read_log
from tests.chaos.workload import Api, Workload

from jobledger.projections.queue.backend import QueueState
from jobledger.projections.read_models import tables as read_model_tables

SEED_VARIABLE = "JOBLEDGER_CHAOS_SEED"
READ_MODEL_TABLES = (
    read_model_tables.JOBS,
    read_model_tables.EXECUTIONS,
    read_model_tables.ATTEMPTS,
    read_model_tables.MINUTE_STATS,
    read_model_tables.HISTOGRAMS,
    read_model_tables.STATUS_COUNTS,
)
_OPENING = frozenset({"jobledger:ExecutionEnqueued", "jobledger:ExecutionRequeued"})
_CLOSING = frozenset(
    f"jobledger:Execution{kind}"
    for kind in ("Completed", "DeadLettered", "Cancelled", "Discarded", "Expired")
)
# Lines of the roles' logs that count duplicates jobledger turned away, and trouble.
LOGGED = (
    "scheduler.fire_conflict",
    "worker.stale_report",
    "worker.lease_refused",
    "worker.lease_lost",
    "leader.elected",
    "leader.stepped_down",
    "queue.lost",
    "queue.rebuilt",
    "projection.event_quarantined",
    "scheduler.tick_failed",
)


@dataclass(frozen=True)
class Scale:
    """How long and how hard: the window under faults, the mean gap between two
    faults and between two ad-hoc runs, and the bound on quiescence."""

    window: float
    fault_every: float
    adhoc_every: float = 0.8
    settle: float = 6.0
    quiesce_timeout: float = 100.0


SHORT = Scale(window=90.0, fault_every=6.0)


@dataclass
class RunResult:
    seed: int
    history: History
    verdict: Verdict
    counts: Counter[str] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    quiesced: bool = False
    window: tuple[datetime, datetime] | None = None


def new_seed() -> int:
    return random.SystemRandom().randrange(1, 2**31)


def run_chaos(
    seed: int, scale: Scale, workdir: Path, progress: Callable[[str], None] = lambda _: None
) -> RunResult:
    """One run in ``workdir`` (its logs stay there); see the module docstring."""
    rng = random.Random(seed)
    deployment = ChaosDeployment(workdir)
    progress(f"seed {seed}: starting the stores and the roles")
    try:
        deployment.start()
        return _under_faults(deployment, rng, seed, scale, progress)
    finally:
        deployment.stop()


def _under_faults(
    deployment: ChaosDeployment,
    rng: random.Random,
    seed: int,
    scale: Scale,
    progress: Callable[[str], None],
) -> RunResult:
    api = Api(deployment.api_url)
    workload = Workload(api, random.Random(rng.random()), scale.window, scale.adhoc_every)
    workload.progress = progress
    plan = plan_faults(random.Random(rng.random()), scale.window, scale.fault_every)
    injector = Injector(deployment, plan, workload.submit_poison, random.Random(rng.random()))
    injector.progress = progress
    watch = Watch(deployment, injector.faults)
    try:
        workload.prepare(datetime.now(UTC) + timedelta(seconds=2))
        progress(f"{len(plan)} faults planned over {scale.window:.0f} s")
        watch.start()
        opened, started = datetime.now(UTC), time.monotonic()
        injector.start(started)
        workload.run(started)
        window = (opened, datetime.now(UTC))
        progress("window closed: undoing the faults")
        injector.join()
        workload.drain(timeout=60)
        deployment.wait_until_serving(timeout=60)
        time.sleep(scale.settle)
        settled_at = datetime.now(UTC)
        workload.pause_crons()
        progress("settled: waiting for every execution to end")
        quiesced = quiesce(deployment, frozenset(injector.injected), scale.quiesce_timeout)
        views = collect_views(deployment, api, frozenset(injector.injected))
    finally:
        watch.stop()
        api.close()
    with deployment.container() as container:
        events = read_log(container.ledger)
    history = History(
        events=events,
        effects=read_effects(deployment.effects),
        accepted=workload.accepted,
        answers={key: frozenset(ids) for key, ids in workload.answers.items()},
        views=views,
        faults=sorted(injector.faults, key=lambda f: f.start),
        exits=watch.exits,
        settled_at=settled_at,
        grace=timedelta(seconds=MISFIRE_GRACE),
        injected=frozenset(injector.injected),
    )
    counts = workload.counts + logged_counts(deployment.logs)
    counts["start refused (store down)"] = watch.refused
    result = RunResult(seed, history, check(history), counts, injector.skipped, quiesced, window)
    progress(f"checked: {len(result.verdict.violations)} violation(s)")
    return result


# ---- quiescence ----------------------------------------------------------------------


def quiesce(deployment: ChaosDeployment, injected: frozenset[UUID], timeout: float) -> bool:
    """Wait until no execution is open and the projections have read the whole log
    (twice in a row, a second apart); False if that did not happen in ``timeout``."""
    deadline = time.monotonic() + timeout
    calm = 0
    with deployment.container() as container:
        open_runs: set[UUID] = set()
        position = 1
        while time.monotonic() < deadline:
            position = _read_on(container.ledger.recorder, position, open_runs)
            head = position - 1
            meta = container.queue.read_meta()
            caught_up = container.read_models().lag() == 0 and meta is not None
            caught_up = caught_up and meta is not None and meta.position >= head
            calm = calm + 1 if caught_up and not (open_runs - injected) else 0
            if calm >= 2:
                return True
            time.sleep(1)
    return False


def _read_on(recorder: Any, position: int, open_runs: set[UUID]) -> int:
    """Follow the log's topics from ``position``; returns the next position."""
    while page := recorder.select_notifications(position, 1000):
        for stored in page:
            if stored.topic in _OPENING:
                open_runs.add(stored.originator_id)
            elif stored.topic in _CLOSING:
                open_runs.discard(stored.originator_id)
        position = page[-1].id + 1
    return position


# ---- what the projections show -------------------------------------------------------


def collect_views(deployment: ChaosDeployment, api: Api, injected: frozenset[UUID]) -> Views:
    """The quarantine (the injected events then dropped, as an operator drops them),
    `jobledger queue verify`, the read models before and after `jobledger projections
    rebuild`, and the dead letters of the read models and of the queue."""
    quarantined = _quarantined(deployment)
    for event_id, stream in quarantined:
        if stream in injected:
            dropped = deployment.cli(
                "projections", "quarantine", "drop", "--id", str(event_id),
                "--by", "chaos", "--reason", "written as an unprojectable event",
            )  # fmt: skip
            assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    verify = deployment.cli("queue", "verify")
    differences = () if verify.returncode == 0 else tuple(verify.stdout.splitlines())
    listed = _dead_letters_listed(api)
    live = dump_read_models(deployment.postgres.url)
    rebuild = deployment.cli("projections", "rebuild")
    assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
    rebuilt = dump_read_models(deployment.postgres.url)
    with deployment.container() as container:
        queue = container.queue
        in_queue = frozenset(
            item.execution_id
            for name in queue.queues()
            for item in queue.items(name)
            if item.state is QueueState.DEAD
        )
    return Views(
        queue_differences=differences,
        quarantined=frozenset(stream for _, stream in quarantined),
        read_models=live,
        rebuilt=rebuilt,
        dlq_read_model=listed,
        dlq_queue=in_queue,
    )


def _quarantined(deployment: ChaosDeployment) -> list[tuple[int, UUID]]:
    listed = deployment.cli("projections", "quarantine", "list", "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return [(int(row["id"]), UUID(row["originator_id"])) for row in json.loads(listed.stdout)]


def dump_read_models(url: str) -> dict[str, list[tuple[Any, ...]]]:
    tables: dict[str, list[tuple[Any, ...]]] = {}
    with psycopg.connect(url) as conn:
        for table in READ_MODEL_TABLES:
            name = sql.Identifier(table)
            rows = conn.execute(sql.SQL("SELECT * FROM {} AS t ORDER BY t").format(name))
            tables[table] = [tuple(row) for row in rows.fetchall()]
    return tables


def _dead_letters_listed(api: Api) -> frozenset[UUID]:
    """What `GET /api/v1/dlq` lists, every page."""
    found: set[UUID] = set()
    while True:
        response = api.call("GET", "/api/v1/dlq", params={"limit": 500, "offset": len(found)})
        assert response is not None, "the API did not answer GET /api/v1/dlq"
        assert response.is_success, response.text
        items = response.json()["items"]
        found |= {UUID(item["id"]) for item in items}
        if len(items) < 500:
            return frozenset(found)


def logged_counts(logs: Path) -> Counter[str]:
    """How often each event of ``LOGGED`` was logged, over every role's every start."""
    counts: Counter[str] = Counter()
    for path in logs.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if '"event"' not in line:
                continue
            try:
                event = json.loads(line).get("event")
            except ValueError:
                continue
            if event in LOGGED:
                counts[event] += 1
    return counts


def keep_or_remove(workdir: Path, *, keep: bool) -> None:
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
