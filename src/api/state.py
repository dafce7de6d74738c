"""What the app's middleware and error handlers share (routes get their services
through dependencies instead): the container, the use cases, the clock."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobledger.domain.clock import Clock, utc_now
from jobledger.runtime.bootstrap import Container
from jobledger.runtime.settings import IPNetwork
from jobledger.services.application import Services

if TYPE_CHECKING:
    from jobledger.api.budgets import Gate


@dataclass
class ApiState:
    container: Container
    services: Services
    now: Clock = utc_now
    trusted_proxies: tuple[IPNetwork, ...] = field(init=False)
    # Set by create_app: the callers' budgets (ADR 77).
    gate: "Gate" = field(init=False)

    def __post_init__(self) -> None:
        # Parsed once: every sign-in reads them.
        self.trusted_proxies = self.container.settings.proxy_networks
