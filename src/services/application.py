"""Every use case of one process, built once from its container."""

from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from jobledger.projections.queue import QueueState
from jobledger.runtime.bootstrap import Container
from jobledger.services.accounts import AccountService
from jobledger.services.admin import Admin
from jobledger.services.archives import Archives
from jobledger.services.attendance import Attendance, stale_after
from jobledger.services.caps import QueueRoom
from jobledger.services.dead_letters import DeadLetters
from jobledger.services.declared_jobs import DeclaredJobs
from jobledger.services.executions import Executions
from jobledger.services.jobs import HandlerNames, Jobs
from jobledger.services.limits import Limits
from jobledger.services.outbox import Outbox
from jobledger.services.queues import Queues
from jobledger.services.system import System
from jobledger.services.views import Views
from jobledger.services.waits import ExecutionWaits
from jobledger.services.workflows import Workflows


@dataclass(frozen=True)
class Services:
    """The use cases the API, the dashboard, the CLI and `jobledger dev` call."""

    jobs: Jobs
    executions: Executions
    dead_letters: DeadLetters
    accounts: AccountService
    admin: Admin
    system: System
    views: Views
    waits: ExecutionWaits
    declared_jobs: DeclaredJobs
    outbox: Outbox | None  # PostgreSQL only
    workflows: Workflows
    queues: Queues
    archives: Archives
    limits: Limits

    @classmethod
    def build(cls, container: Container) -> "Services":
        """The use cases over ``container``. Definitions naming a handler this process
        does not have are refused: its workers have the same registry."""
        registry = container.handlers()
        names = frozenset(registry.names())
        settings = container.settings
        room = QueueRoom(container.queue.queues, settings.max_queues)
        handlers = HandlerNames(names, {name: registry.info(name) for name in names}, queues=room)
        views = Views(container.database, container.ledger, container.presence)
        archives = Archives.build(container)
        # The system.archive handler of this process's worker runs this use case.
        container.provide_archive(archives.scheduled)
        return cls(
            jobs=Jobs(
                container.ledger,
                handlers,
                open_runs=_open_runs(container),
                archived=archives.archived_ids,
            ),
            executions=Executions(container.ledger, handlers, archives.history),
            dead_letters=DeadLetters(container.ledger, container.writer, views),
            accounts=AccountService(container.accounts()),
            admin=Admin(container),
            system=System(container, views, names),
            views=views,
            waits=ExecutionWaits(views),
            declared_jobs=DeclaredJobs(container.ledger, views, handlers),
            outbox=(
                Outbox(container.database, container.ledger, container.writer, handlers)
                if container.settings.uses_postgres
                else None
            ),
            workflows=Workflows(container.ledger, handlers),
            queues=Queues(
                container.ledger,
                container.queue,
                container.checkpoint,
                Attendance(container.presence, stale_after(settings)),
                room=room,
            ),
            archives=archives,
            limits=Limits(container.ledger, container.queue, most=settings.max_named_limits),
        )


def _open_runs(container: Container) -> Callable[[UUID], int]:
    """A job's pending and running executions, as the checkpoint has them."""

    def count(job_id: UUID) -> int:
        counts = container.checkpoint.open_counts(job_id)
        return counts.get(QueueState.PENDING, 0) + counts.get(QueueState.LEASED, 0)

    return count
