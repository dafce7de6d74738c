"""Jobs that code declares, applied as a whole set: `jobledger apply` and
``POST /api/v1/jobs:apply``.

Each declared job has a stable key; its id derives from the key (and the incarnation:
declaring a key again after its job was deleted creates a new job, the old one keeps
its history). Applying a set plans every job first (create, update with the fields that
differ, unchanged, and with ``prune`` delete for managed jobs the set no longer has),
then saves every changed job in one save: the whole set is applied, or nothing is.
Every set has a scope (``jobledger apply``: the module or file; over the API: ``scope``,
or none): its jobs record it, and ``prune`` deletes only managed jobs of the set's
scope, so sets of several modules never prune each other (ADR 82). A
set equal to what the log holds changes nothing and writes no event. The events record
who applied (``by``) and ``source: "code"``.

A declared job may depend on others (``depends_on``) by key: a key of the set names
the job the set declares (created in the same save if it is new), any other key or id
a job in the log. The dependency graph is saved with the set and checked as a whole.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

from jobledger.domain.definitions import JobDefinition
from jobledger.domain.errors import InvalidDefinitionError
from jobledger.domain.job import CODE, Job, check_scope, managed_job_id
from jobledger.domain.roles import Role
from jobledger.persistence.ledger import Ledger
from jobledger.schemas.jobs import ApplyOut, FieldChange, ManagedJobIn, PlannedChange
from jobledger.services.actors import Actor
from jobledger.services.bodies import from_definition, to_definition
from jobledger.services.dependency_links import DependencyLinks
from jobledger.services.errors import InvalidRequestError
from jobledger.services.job_keys import job_by_reference, live_managed
from jobledger.services.jobs import HandlerNames
from jobledger.services.views import Views

_PAGE = 500


@dataclass
class _Step:
    change: PlannedChange
    job: Job | None  # the aggregate to save (None: nothing to write)


class DeclaredJobs:
    """Apply the set of jobs code declares; see the module doc."""

    def __init__(self, ledger: Ledger, views: Views, handlers: HandlerNames) -> None:
        self.ledger = ledger
        self.views = views
        self.handlers = handlers
        self.links = DependencyLinks(ledger, field_of=lambda job: f"{_key(job.key or '')}.")

    def apply(
        self,
        declared: Sequence[ManagedJobIn],
        *,
        at: datetime,
        by: Actor,
        prune: bool = False,
        dry_run: bool = False,
        scope: str | None = None,
    ) -> ApplyOut:
        """Plan the set of ``scope`` against the log and, unless ``dry_run``, apply it
        in one save (with the dependency graph: planned again if another edit changed
        it first)."""
        by.require(Role.OPERATOR)
        check_scope(scope)
        steps: list[_Step] = []

        def planned() -> list[Job]:
            steps[:] = self._planned(declared, _Apply(at, by, scope), prune=prune)
            return [step.job for step in steps if step.job is not None]

        if dry_run:
            self.links.linked(self.ledger.dependency_graph(), planned())  # refusals only
        else:
            self.links.save(planned)
        changed = any(step.job is not None for step in steps)
        return ApplyOut(plan=[step.change for step in steps], applied=changed and not dry_run)

    def _planned(
        self, declared: Sequence[ManagedJobIn], apply: "_Apply", *, prune: bool
    ) -> list[_Step]:
        live = {
            body.key: live_managed(self.ledger, body.key, field=f"{_key(body.key)}.key")
            for body in declared
        }
        definitions = self._checked(declared, live)
        steps = [self._plan(key, definition, live[key], apply) for key, definition in definitions]
        if prune:
            steps += self._prune(set(live), apply)
        return steps

    # ---- checking the set ----------------------------------------------------------------

    def _checked(
        self, declared: Sequence[ManagedJobIn], live: Mapping[str, tuple[Job | None, int]]
    ) -> list[tuple[str, JobDefinition]]:
        """Every job's definition, each checked as a save would check it; the first that
        fails is refused naming its key, so a bad definition writes nothing. ``live``:
        each key's job in the log, or the incarnation it is created as."""
        ids = {key: job.id if job else managed_job_id(key, n) for key, (job, n) in live.items()}

        def upstream(reference: str) -> UUID:
            found = ids.get(reference)
            if found is not None:
                return found
            return job_by_reference(self.ledger, reference, field="depends_on.job")

        seen: set[str] = set()
        checked: list[tuple[str, JobDefinition]] = []
        for body in declared:
            if body.key in seen:
                raise InvalidRequestError(
                    f"{_key(body.key)}: the key is declared twice",
                    field=f"{_key(body.key)}.key",
                    fix="give every declared job a key of its own",
                )
            seen.add(body.key)
            try:
                definition = to_definition(body, upstream)
                self.handlers.check(
                    definition.spec.handler, definition.spec.payload, definition.spec.queue
                )
                definition.check(self.ledger.limits, job_id=ids[body.key])
                self.links.check_upstreams(definition, saved_with=ids.values())
            except InvalidDefinitionError as error:
                raise InvalidDefinitionError(
                    f"{_key(body.key)}.{error.field}", error.problem, error.fix
                ) from None
            checked.append((body.key, definition))
        return checked

    # ---- planning ------------------------------------------------------------------------

    def _plan(
        self,
        key: str,
        definition: JobDefinition,
        live: tuple[Job | None, int],
        apply: "_Apply",
    ) -> _Step:
        job, incarnation = live
        by, scope = apply.by, apply.scope
        if job is None:
            created = Job.declare(
                definition,
                key=key,
                incarnation=incarnation,
                at=apply.at,
                by=by.name,
                via=by.via,
                limits=self.ledger.limits,
                scope=scope,
            )
            return _Step(_change(key, "create", created), created)
        _check_owner(key, job, scope)
        changes = diff(_shown(job.definition), _shown(definition))
        if job.scope != scope:  # a job of no scope joins the set that declares it
            changes.append(FieldChange("scope", job.scope, scope))
        if not changes:
            return _Step(_change(key, "unchanged", job), None)
        job.update(
            definition,
            at=apply.at,
            by=by.name,
            via=by.via,
            limits=self.ledger.limits,
            source=CODE,
            scope=scope,
        )
        return _Step(_change(key, "update", job, changes), job)

    def _prune(self, declared: set[str], apply: "_Apply") -> list[_Step]:
        """A delete for every live managed job of the set's scope whose key the set no
        longer has; another scope's jobs are that scope's to prune."""
        steps = []
        by = apply.by
        for job in self._managed():
            if job.scope == apply.scope and job.key not in declared:
                job.delete(by=by.name, via=by.via, source=CODE)
                steps.append(_Step(_change(job.key or "", "delete", job), job))
        return sorted(steps, key=lambda step: step.change.key)

    def _managed(self) -> Iterator[Job]:
        """The live jobs code manages: listed by the read model, confirmed by the log."""
        cursor: str | None = None
        while True:
            page = self.views.jobs(source=CODE, limit=_PAGE, cursor=cursor)
            for row in page.items:
                job = self.ledger.get_job(row.id)
                if job.managed and not job.deleted:
                    yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


Action = Literal["create", "update", "unchanged", "delete"]


@dataclass(frozen=True)
class _Apply:
    """One apply: when, by whom, and the scope of its set."""

    at: datetime
    by: Actor
    scope: str | None


def _check_owner(key: str, job: Job, scope: str | None) -> None:
    """Refuse a key another scope declares: two sets would take the job from each
    other at every apply. A job of no scope (applied before scopes) is taken."""
    if job.scope is not None and job.scope != scope:
        raise InvalidRequestError(
            f"{_key(key)}: the key belongs to the jobs of scope {job.scope!r}",
            field=f"{_key(key)}.key",
            fix=f"give the job another key, or apply it with the scope {job.scope!r}",
        )


def _key(key: str) -> str:
    """How a refusal names a declared job: by its key in the set."""
    return f"jobs[{key}]"


def _change(
    key: str, action: Action, job: Job, changes: list[FieldChange] | None = None
) -> PlannedChange:
    return PlannedChange(
        key=key,
        action=action,
        job_id=job.id,
        name=job.definition.name,
        changes=changes or [],
        definition=from_definition(job.definition),
    )


def _shown(definition: JobDefinition) -> dict[str, Any]:
    """A definition as the API shows it (so a diff names the fields a user writes)."""
    shown: dict[str, Any] = msgspec.to_builtins(from_definition(definition))
    return shown


def diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[FieldChange]:
    """The fields that differ between two definitions, by dotted path (a field missing
    on one side is None there); a schedule of another kind is one change."""
    changes: list[FieldChange] = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        path = f"{prefix}{name}"
        if (
            isinstance(before, dict)
            and isinstance(after, dict)
            and before.get("kind") == after.get("kind")
        ):
            changes += diff(before, after, f"{path}.")
        else:
            changes.append(FieldChange(path, before, after))
    return changes
