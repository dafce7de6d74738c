"""What the routes are given: the use cases, the clock and the calling actor, as
Litestar dependencies (``Provide``), so no handler looks them up by itself."""

from collections.abc import Callable
from typing import Any, TypeVar

from litestar import Request
from litestar.di import Provide

from jobledger.api.budgets import provide_run_budget
from jobledger.api.security import principal_of
from jobledger.domain.clock import Clock
from jobledger.services.actors import Actor
from jobledger.services.application import Services

T = TypeVar("T")


def _given(value: T) -> Callable[[], T]:
    def provide() -> T:
        return value

    return provide


def provide_actor(request: Request[Any, Any, Any]) -> Actor:
    """Who calls: the signed-in user, acting with the credential's role."""
    return Actor.of(principal_of(request))


def dependencies(services: Services, clock: Clock) -> dict[str, Provide]:
    """The app-wide dependencies, by the parameter name a handler asks for."""
    given: dict[str, object] = {
        "jobs": services.jobs,
        "executions": services.executions,
        "dead_letters": services.dead_letters,
        "bulk_runs": services.bulk_runs,
        "accounts": services.accounts,
        "admin": services.admin,
        "system": services.system,
        "views": services.views,
        "waits": services.waits,
        "declared_jobs": services.declared_jobs,
        "clock": clock,
    }
    given["workflows"] = services.workflows
    given["queues"] = services.queues
    given["limits"] = services.limits
    given["event_stream"] = services.event_stream
    given["notifications"] = services.notifications
    provided = {
        name: Provide(_given(value), use_cache=True, sync_to_thread=False)
        for name, value in given.items()
    }
    return {
        **provided,
        "actor": Provide(provide_actor, sync_to_thread=False),
        "run_budget": Provide(provide_run_budget, sync_to_thread=False),
    }
