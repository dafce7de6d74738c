"""Saving jobs with the dependency graph: each save of jobs whose upstreams change (or
that are deleted) saves the graph too, at the version it was read at, so two edits
that together would close a cycle cannot both commit (see ``domain/dependencies.py``).
The job use cases save one job this way; ``jobledger apply`` a whole set at once."""

from collections.abc import Callable, Collection, Sequence
from uuid import UUID

from jobledger.domain.definitions import JobDefinition
from jobledger.domain.dependencies import CycleError, DependencyGraph
from jobledger.domain.errors import (
    ConflictError,
    InvalidDefinitionError,
    InvalidTransitionError,
    NotFoundError,
)
from jobledger.domain.job import Job
from jobledger.persistence.ledger import Ledger
from jobledger.services.job_keys import is_live

# Saves that lost a race for the dependency graph are tried again on the new graph.
GRAPH_RETRIES = 10


class DependencyLinks:
    """The graph of the jobs' ``depends_on``, kept with the jobs in one save."""

    def __init__(self, ledger: Ledger, field_of: Callable[[Job], str] = lambda _job: "") -> None:
        self.ledger = ledger
        # What a refusal's field starts with for a job (a declared set names its key).
        self.field_of = field_of

    def check_upstreams(
        self, definition: JobDefinition, *, field: str = "", saved_with: Collection[UUID] = ()
    ) -> None:
        """Refuse an upstream that is no live job (``saved_with``: jobs created in the
        same save, which count as live); ``field`` prefixes the refusal's field."""
        for index, dependency in enumerate(definition.depends_on):
            if dependency.job in saved_with or is_live(self.ledger, dependency.job):
                continue
            raise InvalidDefinitionError(
                f"{field}depends_on[{index}].job",
                f"no job {dependency.job} (by id, or by the key it was created or declared with)",
                "name an existing job, by its id or its key",
            )

    def save(self, change: Callable[[], Sequence[Job]]) -> None:
        """Save the jobs ``change`` builds (built again for every try: a failed save
        has taken the events of the last), with the graph when their upstreams change:
        an edit that raced another is checked again on the graph the other one left.
        A conflict on a job itself reaches the caller."""
        for _ in range(GRAPH_RETRIES):
            jobs = change()
            graph = self.ledger.dependency_graph()
            read = None if graph is None else graph.version
            linked = self.linked(graph, jobs)
            try:
                self.ledger.save_all(*jobs, *([linked] if linked is not None else []))
            except ConflictError:
                latest = self.ledger.dependency_graph()
                if linked is not None and (None if latest is None else latest.version) != read:
                    continue  # the graph moved on: check again on the new one
                raise
            return
        raise ConflictError("the dependency graph kept changing; try again")

    def linked(self, graph: DependencyGraph | None, jobs: Sequence[Job]) -> DependencyGraph | None:
        """The graph with the jobs' upstreams set (none for a deleted job), to save with
        them; None if it stays as it was. Refuses a cycle, and deleting a job that a
        job not deleted with it depends on."""
        changes = {
            job.id: [] if job.deleted else [d.job for d in job.definition.depends_on]
            for job in jobs
        }
        if graph is None:
            if not any(changes.values()):
                return None
            graph = DependencyGraph()
        by_id = {job.id: job for job in jobs}
        names = {job.id: job.definition.name for job in jobs}
        try:
            graph.relink(changes)
        except CycleError as cycle:
            on_path = {step: names.get(step) or self._name(step) for step in cycle.path}
            refusal = cycle.refusal(on_path)
            field = self.field_of(by_id[cycle.path[0]]) + refusal.field
            raise InvalidDefinitionError(field, refusal.problem, refusal.fix) from None
        deleted = {job.id for job in jobs if job.deleted}
        for job_id in sorted(deleted):
            waiting = [
                j for j in graph.downstreams(job_id) if j not in deleted and is_live(self.ledger, j)
            ]
            if waiting:
                shown = ", ".join(names.get(j) or self._name(j) for j in sorted(waiting))
                raise InvalidTransitionError(
                    f"cannot delete job {job_id}: {shown} depend on it; "
                    "remove it from their depends_on first"
                )
        return graph if graph.pending_events else None

    # ---- queries ----------------------------------------------------------------------

    def upstreams(self, job_id: UUID) -> list[Job]:
        """The jobs ``job_id`` waits for."""
        job = self.ledger.get_job(job_id)
        return [self.ledger.get_job(d.job) for d in job.definition.depends_on]

    def downstreams(self, job_id: UUID) -> list[Job]:
        """The live jobs that wait for ``job_id``, by name."""
        graph = self.ledger.dependency_graph()
        if graph is None:
            return []
        found = [self.ledger.get_job(j) for j in graph.downstreams(job_id)]
        return sorted((j for j in found if not j.deleted), key=lambda j: j.definition.name)

    def _name(self, job_id: UUID) -> str:
        try:
            return self.ledger.get_job(job_id).definition.name
        except NotFoundError:
            return str(job_id)
