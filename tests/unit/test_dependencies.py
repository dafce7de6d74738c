"""Dependencies between jobs, as pure rules: cycles, verdicts, backfill plans, and the
Job commands they drive."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.domain.backfill import BackfillPlan, plan_backfill, window_occurrences
from jobledger.domain.definitions import ExecutionSpec, JobDefinition
from jobledger.domain.dependencies import (
    CycleError,
    Dependency,
    DependencyGraph,
    Verdict,
    find_cycle,
    verdict,
)
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.execution import ExecutionStatus, occurrence_execution_id
from jobledger.domain.job import SYSTEM, FireTrigger, Job, MissReason
from jobledger.domain.policies import BackfillOverlap, WaitFor
from jobledger.domain.schedules import CronSchedule, MissedFires

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOURLY = CronSchedule("0 * * * *")


def job(**extra: object) -> Job:
    definition = JobDefinition(name="j", spec=ExecutionSpec(handler="test.echo"), **extra)  # type: ignore[arg-type]
    return Job.schedule(definition, at=T0, by="t")


# --- cycles ----------------------------------------------------------------------------


def test_a_direct_cycle_is_found_with_its_path() -> None:
    """If B waits for A, then A waiting for B closes the cycle A -> B -> A."""
    a, b = uuid.uuid4(), uuid.uuid4()
    graph = DependencyGraph()
    graph.link(b, [a])
    with pytest.raises(CycleError) as refused:
        graph.link(a, [b])
    assert refused.value.path == (a, b, a)
    refusal = refused.value.refusal({a: "A", b: "B"})
    assert refusal.field == "depends_on"
    assert "A -> B -> A" in str(refusal)


def test_an_indirect_cycle_is_found_and_nothing_changes() -> None:
    """If C waits for B and B for A, then A waiting for C is refused (A -> C -> B -> A),
    and the graph keeps the edges it had."""
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    graph = DependencyGraph()
    graph.link(b, [a])
    graph.link(c, [b])
    with pytest.raises(CycleError) as refused:
        graph.link(a, [c])
    assert refused.value.path == (a, c, b, a)
    assert a not in graph.upstreams
    assert graph.downstreams(a) == [b]


def test_an_update_that_closes_a_cycle_is_refused() -> None:
    """If D first waits for nothing and is then changed to wait for its own downstream,
    then the change is refused."""
    d, e = uuid.uuid4(), uuid.uuid4()
    graph = DependencyGraph()
    graph.link(d, [])
    graph.link(e, [d])
    with pytest.raises(CycleError):
        graph.link(d, [e])
    graph.link(d, [])  # unchanged: no event
    assert len(graph.collect_events()) == 2


def test_a_set_is_linked_as_it_leaves_the_graph() -> None:
    """If B waits for A and a set of changes makes A wait for B and B for nothing, then
    the set is linked in either order (the graph it leaves has no cycle); a set that
    closes a cycle among its own jobs is refused and changes nothing."""
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for order in ((a, b), (b, a)):
        graph = DependencyGraph()
        graph.link(b, [a])
        changes = {a: [b], b: []}
        graph.relink({job: changes[job] for job in order})
        assert graph.upstreams == {a: (b,)}
    graph = DependencyGraph()
    graph.link(b, [a])
    with pytest.raises(CycleError) as refused:
        graph.relink({a: [c], c: [b]})
    assert refused.value.path[0] == refused.value.path[-1]
    assert graph.upstreams == {b: (a,)}


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=30))
@settings(max_examples=200, deadline=None)
def test_the_graph_never_holds_a_cycle(edges: list[tuple[int, int]]) -> None:
    """If any edges are added one by one, then every refused one would have closed a
    cycle (its path is one), and the accepted graph stays acyclic."""
    ids = [uuid.UUID(int=i + 1) for i in range(8)]
    graph = DependencyGraph()
    for down, up in edges:
        wanted = sorted({*graph.upstreams.get(ids[down], ()), ids[up]})
        path = find_cycle(graph.upstreams, ids[down], wanted)
        if path is None:
            graph.link(ids[down], wanted)
        else:
            assert path[0] == path[-1] == ids[down]
            with pytest.raises(CycleError):
                graph.link(ids[down], wanted)
    for node in ids:
        assert find_cycle(graph.upstreams, node, graph.upstreams.get(node, ())) is None


# --- verdicts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("on", "status", "expected"),
    [
        (WaitFor.COMPLETED, None, Verdict.WAIT),
        (WaitFor.COMPLETED, "running", Verdict.WAIT),
        (WaitFor.COMPLETED, "completed", Verdict.FIRE),
        (WaitFor.COMPLETED, "dead_lettered", Verdict.SKIP),
        (WaitFor.COMPLETED, "cancelled", Verdict.SKIP),
        (WaitFor.COMPLETED, "skipped", Verdict.SKIP),
        (WaitFor.FINISHED, "dead_lettered", Verdict.FIRE),
        (WaitFor.FINISHED, "skipped", Verdict.FIRE),
        (WaitFor.FINISHED, "pending", Verdict.WAIT),
    ],
)
def test_one_upstream_verdict(on: WaitFor, status: str | None, expected: Verdict) -> None:
    """If the upstream run is in ``status``, then the downstream occurrence waits, fires
    or is skipped as its dependency says."""
    upstream = uuid.uuid4()
    assert verdict([Dependency(job=upstream, on=on)], {upstream: status}) is expected


def test_fan_in_waits_for_all_but_a_failure_decides_at_once() -> None:
    """If one of two upstreams completed, then the occurrence waits for the other; if
    one failed, then it is skipped whatever the other does."""
    a, b = uuid.uuid4(), uuid.uuid4()
    deps = [Dependency(job=a), Dependency(job=b)]
    assert verdict(deps, {a: "completed", b: "running"}) is Verdict.WAIT
    assert verdict(deps, {a: "completed", b: "completed"}) is Verdict.FIRE
    assert verdict(deps, {a: "dead_lettered", b: None}) is Verdict.SKIP


def test_a_job_with_dependencies_must_not_have_a_schedule_of_its_own() -> None:
    """If a job depends on another and also has a cron, then the definition is refused
    naming the schedule."""
    with pytest.raises(InvalidDefinitionError) as refused:
        job(schedule=HOURLY, depends_on=(Dependency(job=uuid.uuid4()),))
    assert refused.value.field == "schedule"


def test_a_dependency_listed_twice_is_refused() -> None:
    """If a job names the same upstream twice, then the definition is refused."""
    upstream = uuid.uuid4()
    twice = (Dependency(job=upstream), Dependency(job=upstream, on=WaitFor.FINISHED))
    with pytest.raises(InvalidDefinitionError, match="twice"):
        job(depends_on=twice)


# --- the Job commands -------------------------------------------------------------------


def test_a_dependency_fire_and_skip_leave_a_recorded_outcome() -> None:
    """If an occurrence is released, then it fires with trigger dependency and the
    upstream results; if skipped, then its execution is decided skipped and the job
    records JobFiresMissed{upstream_failed}."""
    down = job(depends_on=(Dependency(job=uuid.uuid4()),))
    fired = down.fire_dependency(scheduled_for=T0, at=T0, upstream_results={"u": {"n": 1}})
    assert fired is not None
    assert fired.id == occurrence_execution_id(down.id, T0)
    assert fired.upstream_results == {"u": {"n": 1}}
    assert down.collect_events()[-1].trigger is FireTrigger.DEPENDENCY  # type: ignore[attr-defined]
    later = T0 + timedelta(hours=1)
    upstream_run = uuid.uuid4()
    skipped = down.skip_dependency(
        scheduled_for=later, at=later, failed={upstream_run: "dead_lettered"}
    )
    assert skipped is not None
    assert skipped.status is ExecutionStatus.SKIPPED
    assert skipped.id == occurrence_execution_id(down.id, later)
    missed = down.collect_events()[-1]
    assert isinstance(missed, Job.FiresMissed)
    assert missed.reason is MissReason.UPSTREAM_FAILED
    assert down.last_scheduled_for == later


def test_mirrored_upstream_misses_are_recorded_once() -> None:
    """If an upstream's run of missed occurrences is mirrored twice (a replay), then the
    second time records nothing."""
    down = job(depends_on=(Dependency(job=uuid.uuid4()),))
    upstream = uuid.uuid4()
    missed = MissedFires(first=T0, last=T0 + timedelta(hours=2), count=3)
    assert down.mirror_upstream_misses(upstream, missed)
    assert not down.mirror_upstream_misses(upstream, missed)
    assert down.skipped_through == {str(upstream): missed.last}


def test_pause_on_failure_pauses_once_and_not_for_a_death_before_the_resume() -> None:
    """If pause_on_failure is set, then a dead letter pauses the job by system naming
    the execution; after a resume, a dead letter from before it pauses nothing."""
    watched = job(schedule=HOURLY, pause_on_failure=True)
    dead = uuid.uuid4()
    assert watched.pause_for_failure(execution_id=dead, dead_at=T0)
    paused = watched.collect_events()[-1]
    assert isinstance(paused, Job.Paused)
    assert (paused.by, paused.execution_id) == (SYSTEM, dead)
    assert not watched.pause_for_failure(execution_id=dead, dead_at=T0)
    watched.resume(at=T0 + timedelta(minutes=5), by="op")
    assert not watched.pause_for_failure(execution_id=dead, dead_at=T0)
    assert watched.pause_for_failure(execution_id=uuid.uuid4(), dead_at=T0 + timedelta(minutes=6))


# --- backfill --------------------------------------------------------------------------


def test_backfill_plan_counts_and_modes() -> None:
    """If 24 hourly occurrences are in the window and 5 already fired, then allow fires
    the 19 others, buffer_all fires the first and buffers all 19, and skip fires one
    and skips 18 (or none while a run is open)."""
    start, end = T0, T0 + timedelta(hours=23)
    occurrences = window_occurrences(HOURLY, start, end)
    assert len(occurrences) == 24
    fired = set(occurrences[3:8])

    def plan(
        overlap: BackfillOverlap, *, buffer_busy: bool = False, open_runs: int = 0
    ) -> BackfillPlan:
        return plan_backfill(
            HOURLY,
            occurrences,
            start=start,
            end=end,
            overlap=overlap,
            fired=fired,
            buffer_busy=buffer_busy,
            open_runs=open_runs,
        )

    allowed = plan(BackfillOverlap.ALLOW)
    assert (len(allowed.already_fired), len(allowed.missing), len(allowed.fire)) == (5, 19, 19)
    buffered = plan(BackfillOverlap.BUFFER_ALL)
    assert buffered.fire == (occurrences[0],)
    assert len(buffered.buffer) == 19
    assert plan(BackfillOverlap.BUFFER_ALL, buffer_busy=True).fire == ()
    skipped = plan(BackfillOverlap.SKIP)
    assert (len(skipped.fire), len(skipped.skip)) == (1, 18)
    assert [run.count for run in skipped.skipped_runs()] == [2, 16]
    assert plan(BackfillOverlap.SKIP, open_runs=1).fire == ()


def test_a_buffered_backfill_fires_one_at_a_time_in_order() -> None:
    """If a paused job is backfilled with buffer_all, then the first occurrence fires;
    each release after the running one ended fires the next, and a replayed release
    (for a run that is not the current one) fires nothing."""
    backfilled = job(schedule=HOURLY)
    backfilled.pause(by="op")
    start, end = T0, T0 + timedelta(hours=2)
    occurrences = window_occurrences(HOURLY, start, end)
    plan = plan_backfill(
        HOURLY, occurrences, start=start, end=end, overlap=BackfillOverlap.BUFFER_ALL, fired=set()
    )
    first = backfilled.backfill(plan, at=end, by="op", reason="fill")
    assert [e.scheduled_for for e in first] == occurrences[:1]
    second = backfilled.release_backfill(finished=occurrences[0], fired={occurrences[0]}, at=end)
    assert second is not None
    assert second.scheduled_for == occurrences[1]
    assert backfilled.release_backfill(finished=occurrences[0], fired=set(), at=end) is None
    third = backfilled.release_backfill(finished=occurrences[1], fired=set(occurrences[:2]), at=end)
    assert third is not None
    assert third.scheduled_for == occurrences[2]
    assert (
        backfilled.release_backfill(finished=occurrences[2], fired=set(occurrences), at=end) is None
    )
    assert backfilled.paused
    assert backfilled.next_fire_at is None
