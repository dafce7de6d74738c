"""What the app's middleware and error handlers share (routes get their services
through dependencies instead): the process's ports, the use cases, the clock."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobledger.domain.clock import Clock, utc_now
from jobledger.infra.budgets import Budgets
from jobledger.infra.metrics import Metrics
from jobledger.infra.outages import DependencyHealth
from jobledger.infra.settings import IPNetwork, Settings
from jobledger.services.application import Services

if TYPE_CHECKING:
    from jobledger.api.budgets import Gate


@dataclass(frozen=True)
class ApiPorts:
    """What the HTTP layer needs of its process beside the use cases, handed over by
    the composition root."""

    settings: Settings
    metrics: Metrics
    health: DependencyHealth
    budgets: Budgets


@dataclass
class ApiState:
    ports: ApiPorts
    services: Services
    now: Clock = utc_now
    trusted_proxies: tuple[IPNetwork, ...] = field(init=False)
    # Set by create_app: the callers' budgets (ADR 77).
    gate: "Gate" = field(init=False)

    def __post_init__(self) -> None:
        # Parsed once: every sign-in reads them.
        self.trusted_proxies = self.ports.settings.proxy_networks
