"""Every use case of one process, built by the composition root (``bootstrap``)."""

from dataclasses import dataclass

from jobledger.services.accounts import AccountService
from jobledger.services.admin import Admin
from jobledger.services.archives import Archives
from jobledger.services.bulk_runs import BulkRuns
from jobledger.services.dead_letters import DeadLetters
from jobledger.services.declared_jobs import DeclaredJobs
from jobledger.services.event_stream import EventStream
from jobledger.services.executions import Executions
from jobledger.services.jobs import Jobs
from jobledger.services.limits import Limits
from jobledger.services.notifications import Notifications
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
    bulk_runs: BulkRuns
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
    event_stream: EventStream
    notifications: Notifications
