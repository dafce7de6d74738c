"""Workflow step-to-step latency: from an upstream run's completion to its downstream run.

Creates a throwaway PostgreSQL database and starts a private redis-server on a free
loopback port (persistence off); stops the server and drops the database at the end,
also on an error or Ctrl-C.

    python -m bench.workflows [--quick] [--admin-url URL]

As in production (the Procfile), the roles are processes of their own: a `jobledger
projector` and a `jobledger worker` (``test.echo``, 8 slots) run as child processes,
and this process is the scheduler (``SchedulerService``: Redis leadership and its
releases loop, with the shipped settings); it also starts the work and reads the log.
Two workloads, one after the other:

- workflows: chains of steps, started a few at a time, so that several run at once;
- jobs: A -> B -> C, where B depends on A and C on B, and A is backfilled over a day of
  hourly occurrences in one go (24 runs at once, then 24 of B, then 24 of C: bursts).

Per edge (an upstream run and the downstream run it released):

- completed -> enqueued: the downstream's ``ExecutionEnqueued`` timestamp minus the
  upstream's ``ExecutionCompleted`` timestamp (both taken when the event is built,
  before its write commits): the releases loop's wake-up, read and save;
- completed -> leased: the downstream's first ``ExecutionLeased`` minus the same, so the
  projection into Redis and the worker's lease loop too.

Target: p99 completed -> enqueued at most 50 ms on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import _support as support
from jobledger.adapters.store import migrate
from jobledger.bootstrap import Container, bootstrap
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import Dependency
from jobledger.domain.execution import Execution, ExecutionStatus, occurrence_execution_id
from jobledger.domain.roles import Role
from jobledger.domain.schedules import CronSchedule, ManualSchedule
from jobledger.domain.workflow import StepSpec, Workflow, WorkflowStatus
from jobledger.infra.logging import configure_logging
from jobledger.infra.settings import Settings, load_settings
from jobledger.runtime.scheduler import SchedulerService
from jobledger.services.actors import Actor
from jobledger.services.jobs import Jobs
from jobledger.services.workflows import Workflows

if TYPE_CHECKING:
    import argparse
    import uuid
    from collections.abc import Sequence

    from jobledger.persistence.ledger import Ledger

TARGET_P99_MS = 50.0
SPEC = ExecutionSpec(handler="test.echo")
BY = Actor("bench", Role.ADMIN)
TIMEOUT = 300.0
COLUMNS = (
    ("workload", "{:<22}"),
    ("measure", "{:<22}"),
    ("edges", "{:>5}"),
    ("p50_ms", "{:>8}"),
    ("p99_ms", "{:>8}"),
    ("max_ms", "{:>8}"),
    ("target", "{:<16}"),
    ("met", "{:<3}"),
)


@dataclass(frozen=True)
class Sizes:
    workflows: int
    steps: int  # per workflow, in a chain
    at_once: int  # workflows started together
    hours: int  # occurrences of the job chain's backfill


def sizes(*, quick: bool) -> Sizes:
    return Sizes(6, 6, 3, 6) if quick else Sizes(40, 10, 8, 24)


@dataclass(frozen=True)
class Row:
    workload: str
    measure: str
    edges: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    target: str | None = None
    met: bool | None = None


@dataclass(frozen=True)
class Edge:
    """One release: when the upstream completed, the downstream was enqueued and leased."""

    completed: datetime
    enqueued: datetime
    leased: datetime


# ---- reading the log -------------------------------------------------------------------


def _first(ledger: Ledger, run_id: uuid.UUID, kind: type[Any]) -> datetime:
    for event in ledger.history(run_id):
        if isinstance(event, kind):
            return event.timestamp  # type: ignore[no-any-return]
    raise RuntimeError(f"{run_id} has no {kind.__name__}")


def _edge(ledger: Ledger, upstreams: Sequence[uuid.UUID], downstream: uuid.UUID) -> Edge:
    """The edge into ``downstream``: released by the last of its upstreams to complete."""
    completed = max(_first(ledger, up, Execution.Completed) for up in upstreams)
    return Edge(
        completed,
        _first(ledger, downstream, Execution.Enqueued),
        _first(ledger, downstream, Execution.Leased),
    )


# ---- the workloads ----------------------------------------------------------------------


def chain(steps: int) -> list[StepSpec]:
    return [
        StepSpec(name=f"s{i}", spec=SPEC, after=(f"s{i - 1}",) if i else ()) for i in range(steps)
    ]


def run_workflows(container: Container, size: Sizes) -> list[Edge]:
    service = Workflows(container.ledger)
    started: list[Workflow] = []
    for batch in range(0, size.workflows, size.at_once):
        group = [
            service.start(name=f"chain {i}", steps=chain(size.steps), at=datetime.now(UTC), by=BY)
            for i in range(batch, min(batch + size.at_once, size.workflows))
        ]
        support.wait_for(
            lambda group=group: all(  # type: ignore[misc]
                service.get(w.id).status is not WorkflowStatus.RUNNING for w in group
            ),
            TIMEOUT,
            "a group of workflows to end",
            poll=0.05,
        )
        started += group
        support.log(f"workflows: {len(started)} of {size.workflows} done")
    edges = []
    for workflow in started:
        done = service.get(workflow.id)
        if done.status is not WorkflowStatus.COMPLETED:
            raise RuntimeError(f"workflow {done.id} ended {done.status}")
        for name, spec in done.steps.items():
            if spec.after:
                ups = [done.execution_id(up) for up in spec.after]
                edges.append(_edge(container.ledger, ups, done.execution_id(name)))
    return edges


def run_job_chain(container: Container, size: Sizes) -> list[Edge]:
    jobs = Jobs(container.ledger)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    first = JobDefinition(name="import", spec=SPEC, schedule=CronSchedule("0 * * * *"))
    a = jobs.schedule(first, at=now - timedelta(days=2), by=BY)
    b = jobs.schedule(_after("load", a.id), at=now, by=BY)
    c = jobs.schedule(_after("report", b.id), at=now, by=BY)
    end = now - timedelta(hours=1)
    start = end - timedelta(hours=size.hours - 1)
    jobs.backfill(a.id, start=start, end=end, at=datetime.now(UTC), by=BY)
    occurrences = [start + timedelta(hours=h) for h in range(size.hours)]
    last = [occurrence_execution_id(c.id, o) for o in occurrences]
    support.wait_for(
        lambda: all(_status(container.ledger, r) is ExecutionStatus.COMPLETED for r in last),
        TIMEOUT,
        "the job chain to complete",
        poll=0.05,
    )
    edges = []
    for occurrence in occurrences:
        for up, down in ((a, b), (b, c)):
            ups = [occurrence_execution_id(up.id, occurrence)]
            edges.append(_edge(container.ledger, ups, occurrence_execution_id(down.id, occurrence)))
    return edges


def _after(name: str, upstream: uuid.UUID) -> JobDefinition:
    return JobDefinition(
        name=name, spec=SPEC, schedule=ManualSchedule(), depends_on=(Dependency(job=upstream),)
    )


def _status(ledger: Ledger, run_id: uuid.UUID) -> ExecutionStatus | None:
    try:
        return ledger.get_execution(run_id).status
    except Exception:  # noqa: BLE001 (not released yet)
        return None


# ---- figures -------------------------------------------------------------------------------


def _ms(values: Sequence[timedelta]) -> list[float]:
    return sorted(v.total_seconds() * 1000 for v in values)


def rows_of(workload: str, edges: Sequence[Edge]) -> list[Row]:
    enqueued = _ms([e.enqueued - e.completed for e in edges])
    leased = _ms([e.leased - e.completed for e in edges])
    p99 = support.percentile(enqueued, 0.99)
    return [
        Row(
            workload,
            "completed -> enqueued",
            len(enqueued),
            support.percentile(enqueued, 0.50),
            p99,
            enqueued[-1] if enqueued else None,
            f"p99 <= {TARGET_P99_MS:g} ms",
            p99 <= TARGET_P99_MS,
        ),
        Row(
            workload,
            "completed -> leased",
            len(leased),
            support.percentile(leased, 0.50),
            support.percentile(leased, 0.99),
            leased[-1] if leased else None,
        ),
    ]


# ---- entry point -----------------------------------------------------------------------


def bench_settings(url: str, redis_url: str) -> Settings:
    """The shipped defaults on this database and Redis; warnings only in the log."""
    return load_settings(
        {},
        test_handlers="true",
        database_url=url,
        redis_url=redis_url,
        redis_prefix="bench-workflows",
        log_level="warning",
        worker_slots="8",
    )


def _role(name: str, settings: Settings, folder: Path) -> subprocess.Popen[bytes]:
    """``jobledger NAME`` as a child process on the same stores, its log in ``folder``."""
    environ = support.role_environment(
        settings.database_url,
        settings.redis_url,
        settings.redis_prefix,
        test_handlers="true",
        worker_slots=str(settings.worker_slots),
        log_level="warning",
    )
    with (folder / f"{name}.log").open("ab") as output:
        return subprocess.Popen(  # noqa: S603 (our own entry point, fixed arguments)
            [sys.executable, "-m", "jobledger.cli", name],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )


def measure(settings: Settings, size: Sizes) -> list[Row]:
    migrate(settings, progress=support.log)
    configure_logging(settings)
    with bootstrap(settings) as container, tempfile.TemporaryDirectory() as folder:
        roles = [_role(name, settings, Path(folder)) for name in ("projector", "worker")]
        scheduler = SchedulerService(container.scheduler(), health=container.health)
        scheduler.start()
        try:
            time.sleep(3.0)  # the roles start, the leader is elected, the loops listen
            for process in roles:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"a role exited: {support.tail(Path(folder) / 'worker.log')}"
                    )
            flows = run_workflows(container, size)
            chained = run_job_chain(container, size)
        finally:
            scheduler.stop()
            for process in roles:
                support.stop_group(process)
    return [*rows_of("workflows (chains)", flows), *rows_of("jobs (backfill burst)", chained)]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = sizes(quick=args.quick)
    try:
        with (
            support.throwaway_postgres(args.admin_url) as url,
            support.private_redis() as redis_url,
        ):
            settings = bench_settings(url, redis_url)
            store = support.versions(url, redis_url)
            before = support.load_average()
            support.log(f"store: {store}; {os.cpu_count()} CPUs; load average {before}")
            rows = measure(settings, size)
    except KeyboardInterrupt:
        support.log("interrupted; redis-server was stopped and the database dropped")
        return 130
    print(
        f"{size.workflows} workflows of {size.steps} chained steps ({size.at_once} at a time); "
        f"a job chain of 3 over {size.hours} backfilled occurrences; worker slots "
        f"{settings.worker_slots}, writer batch {settings.writer_max_batch} / "
        f"{settings.writer_max_delay_ms:g} ms"
    )
    print(support.format_table(rows, COLUMNS))
    document = {
        "benchmark": "workflows",
        "recorded_at": support.recorded_at(),
        "quick": args.quick,
        "store": store,
        **support.machine(),
        "load_average_before": before,
        "load_average_after": support.load_average(),
        "sizes": asdict(size),
        "rows": [asdict(row) for row in rows],
    }
    path = support.write_json("workflows-quick" if args.quick else "workflows", document)
    print(f"\nJSON: {path}")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = support.argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="a few workflows, a smoke test")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
