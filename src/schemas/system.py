"""Readiness, and the one shape of every error the API answers with."""

import msgspec


class Check(msgspec.Struct):
    ok: bool
    detail: str


class Readiness(msgspec.Struct):
    ready: bool
    checks: dict[str, Check]
    # The stores that cannot be reached now (postgresql, redis), if any.
    unreachable: list[str] = msgspec.field(default_factory=list)
    # Events a follower set aside: the process serves (200), the projections are
    # degraded until the events are retried (ADR "quarantined events").
    degraded: bool = False
    quarantined: int = 0


class ErrorDetail(msgspec.Struct, omit_defaults=True):
    status: int
    code: str
    message: str
    field: str | None = None
    fix: str | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorDetail
