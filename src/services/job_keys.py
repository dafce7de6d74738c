"""Jobs named by a key instead of an id: one created over the API with a key (its id
derives from the key), or one that code declares (``jobledger apply``: its id derives
from the key and the incarnation, since a key declared again after its job was deleted
names a new job, and the old one keeps its history)."""

from uuid import UUID

from jobledger.domain.errors import InvalidDefinitionError, NotFoundError
from jobledger.domain.job import Job, job_id_for_key, managed_job_id
from jobledger.persistence.ledger import Ledger
from jobledger.services.errors import InvalidRequestError

# A key declared, deleted and declared again this many times is a loop, not a history.
MAX_INCARNATIONS = 1000


def live_managed(ledger: Ledger, key: str, *, field: str) -> tuple[Job | None, int]:
    """The live job code declares as ``key``, or None and the incarnation to create;
    ``field`` names the key in the refusal of a key declared too often."""
    for incarnation in range(MAX_INCARNATIONS):
        try:
            job = ledger.get_job(managed_job_id(key, incarnation))
        except NotFoundError:
            return None, incarnation
        if not job.deleted:
            return job, incarnation
    raise InvalidRequestError(
        f"{field}: the key {key!r} was declared and deleted {MAX_INCARNATIONS} times",
        field=field,
        fix="declare the job under a new key",
    )


def job_by_reference(ledger: Ledger, reference: str, *, field: str) -> UUID:
    """The id of the job ``reference`` names: an id, or the key of a live job created
    over the API or declared in code. A key that names no live job gives the id a job
    created with it would have (the caller's existence check refuses it); one that names
    both kinds is refused (naming ``field``), since either could be meant."""
    try:
        return UUID(reference)
    except ValueError:
        pass
    created = job_id_for_key(reference)
    managed, _ = live_managed(ledger, reference, field=field)
    if managed is None:
        return created
    if is_live(ledger, created):
        raise InvalidDefinitionError(
            field,
            f"the key {reference!r} names two jobs: {created} (created over the API) and "
            f"{managed.id} (declared in code)",
            "name the job you mean by its id",
        )
    return managed.id


def is_live(ledger: Ledger, job_id: UUID) -> bool:
    """Whether ``job_id`` is a job in the log that was not deleted."""
    try:
        return not ledger.get_job(job_id).deleted
    except NotFoundError:
        return False
