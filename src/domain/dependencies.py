"""Dependencies between jobs: what a job waits for, the graph of them, and the rules.

A job may depend on other jobs (its upstreams): when every upstream's run for an
occurrence (a ``scheduled_for``) reached the state the dependency names, the job fires
for the same occurrence. ``completed`` waits for success; ``finished`` for any end
(completed, dead-lettered, cancelled, discarded or skipped). A run that ended another
way than a ``completed`` dependency waits for leads the downstream occurrence to a
recorded outcome: a skipped execution and ``JobFiresMissed{reason: upstream_failed}``.

Every dependency of every job is in one ``DependencyGraph`` aggregate. A change of a
job's dependencies saves the graph too, at the version it was read at, so two edits
that each keep the graph acyclic but together would close a cycle cannot both commit:
the second one conflicts, is checked again on the new graph, and is refused.
"""

import enum
import uuid
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import msgspec
from eventsourcing.domain import Aggregate, event

from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.policies import WaitFor

N = TypeVar("N", bound=Hashable)
MAX_UPSTREAMS: Final = 20
GRAPH_ID: Final = uuid.UUID("3c9d6a47-51e2-4f0b-8b1e-7a2d9c4e6f18")


class Dependency(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream of a job: its id, and the state its run must reach."""

    job: uuid.UUID
    on: WaitFor = WaitFor.COMPLETED


class Verdict(enum.StrEnum):
    """What a downstream occurrence comes to, given its upstreams' runs."""

    WAIT = "wait"  # an upstream run is still open (or not fired yet)
    FIRE = "fire"
    SKIP = "skip"  # an upstream run ended another way than the dependency waits for


# The statuses an upstream run can end in (Execution statuses, by value).
COMPLETED: Final = "completed"
ENDED: Final = frozenset({"completed", "dead_lettered", "cancelled", "discarded", "skipped"})


def verdict(
    dependencies: Sequence[Dependency], statuses: Mapping[uuid.UUID, str | None]
) -> Verdict:
    """The downstream occurrence's verdict, from each upstream run's status (None: no
    run for the occurrence yet). A failure decides at once; a fire waits for all."""
    waiting = False
    for dependency in dependencies:
        status = statuses.get(dependency.job)
        if status is None or status not in ENDED:
            waiting = True
        elif dependency.on is WaitFor.COMPLETED and status != COMPLETED:
            return Verdict.SKIP
    return Verdict.WAIT if waiting else Verdict.FIRE


def check_dependencies(dependencies: Sequence[Dependency], *, job_id: uuid.UUID | None) -> None:
    """The rules a job's own list must keep (the graph checks cycles through others)."""
    if len(dependencies) > MAX_UPSTREAMS:
        raise InvalidDefinitionError(
            "depends_on",
            f"names {len(dependencies)} upstream jobs",
            f"depend on at most {MAX_UPSTREAMS} jobs",
        )
    seen: set[uuid.UUID] = set()
    for dependency in dependencies:
        if dependency.job in seen:
            raise InvalidDefinitionError(
                "depends_on",
                f"names job {dependency.job} twice",
                "name each upstream job once",
            )
        seen.add(dependency.job)
        if dependency.job == job_id:
            raise InvalidDefinitionError(
                "depends_on", "names the job itself", "a job cannot wait for its own runs"
            )


class CycleError(Exception):
    """The change would close a cycle; ``path`` runs from the job back to it."""

    def __init__(self, path: tuple[uuid.UUID, ...]) -> None:
        self.path = path
        super().__init__(" -> ".join(str(step) for step in path))

    def refusal(self, names: Mapping[uuid.UUID, str]) -> InvalidDefinitionError:
        """The refusal a caller shows, with the jobs on the path named."""
        shown = " -> ".join(names.get(step, str(step)) for step in self.path)
        return InvalidDefinitionError(
            "depends_on",
            f"closes a cycle: {shown}",
            "remove one of the dependencies on that path; a job may not wait for itself",
        )


def find_cycle(
    upstreams: Mapping[N, Iterable[N]], node: N, new_upstreams: Iterable[N]
) -> tuple[N, ...] | None:
    """The path ``node -> upstream -> ... -> node`` that giving ``node`` the upstreams
    ``new_upstreams`` would close, or None. A depth-first search from each new
    upstream along the existing edges (the shortest path is not promised)."""
    graph = dict(upstreams)
    graph[node] = tuple(new_upstreams)
    # (node, path to it from the start); a node seen once needs no second visit.
    pending: list[tuple[N, tuple[N, ...]]] = [
        (upstream, (node, upstream)) for upstream in reversed(tuple(graph[node]))
    ]
    seen: set[N] = set()
    while pending:
        current, path = pending.pop()
        if current == node:
            return path
        if current in seen:
            continue
        seen.add(current)
        pending.extend((nxt, (*path, nxt)) for nxt in reversed(tuple(graph.get(current, ()))))
    return None


class DependencyGraph(Aggregate):
    """Which jobs each job waits for: one aggregate, so an edit is checked against
    every other edit (see the module docstring)."""

    TOPIC = "jobledger:DependencyGraph"

    class Created(Aggregate.Created):
        TOPIC = "jobledger:DependencyGraphCreated"

    class Linked(Aggregate.Event):
        """A job's upstreams were set (empty: it depends on nothing any more)."""

        TOPIC = "jobledger:DependenciesLinked"
        job_id: uuid.UUID
        upstreams: tuple[uuid.UUID, ...]

    @event(Created)
    def __init__(self) -> None:
        self.upstreams: dict[uuid.UUID, tuple[uuid.UUID, ...]] = {}

    @staticmethod
    def create_id() -> uuid.UUID:
        return GRAPH_ID

    def link(self, job_id: uuid.UUID, upstreams: Sequence[uuid.UUID]) -> None:
        """Set ``job_id``'s upstreams; raises ``CycleError`` if that closes a cycle."""
        self.relink({job_id: upstreams})

    def relink(self, changes: Mapping[uuid.UUID, Sequence[uuid.UUID]]) -> None:
        """Set the upstreams of several jobs at once (a set of jobs saved together);
        raises ``CycleError`` if the graph they leave has a cycle. The check is on that
        graph, so two jobs that swap which waits for which pass in either order."""
        wanted = {
            job_id: tuple(upstreams)
            for job_id, upstreams in changes.items()
            if self.upstreams.get(job_id, ()) != tuple(upstreams)
        }
        after = {**self.upstreams, **wanted}
        for job_id, upstreams in wanted.items():
            path = find_cycle(after, job_id, upstreams)
            if path is not None:
                raise CycleError(path)
        for job_id, upstreams in wanted.items():
            self._linked(job_id=job_id, upstreams=upstreams)

    def downstreams(self, job_id: uuid.UUID) -> list[uuid.UUID]:
        """The jobs that wait for ``job_id``, in no particular order."""
        return [job for job, ups in self.upstreams.items() if job_id in ups]

    def has_downstreams(self, job_id: uuid.UUID) -> bool:
        return any(job_id in ups for ups in self.upstreams.values())

    @event(Linked)
    def _linked(self, *, job_id: uuid.UUID, upstreams: tuple[uuid.UUID, ...]) -> None:
        if upstreams:
            self.upstreams[job_id] = upstreams
        else:
            self.upstreams.pop(job_id, None)


def upstream_results(results: Mapping[uuid.UUID, dict[str, Any] | None]) -> dict[str, Any]:
    """What a downstream handler sees of its upstreams' runs: each completed run's
    result, by upstream job id (as text, JSON keys being strings)."""
    return {str(job): result for job, result in results.items() if result is not None}
