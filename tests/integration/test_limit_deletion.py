"""A deleted named limit stops applying, through the log, on the memory queue (SQLite)
and on Redis (PostgreSQL) alike; defining its name again applies it again."""

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from tests.conftest import actor

from jobledger.bootstrap import Container, bootstrap, build_services
from jobledger.domain.definitions import ExecutionSpec
from jobledger.domain.limits import ConcurrencyLimit, Limit, RunLimits, limit_id
from jobledger.infra.settings import load_settings
from jobledger.schemas.limits import LimitValuesIn

Q = "mail"
TTL = timedelta(seconds=30)


@pytest.fixture(params=["sqlite", "postgres"])
def container(request: pytest.FixtureRequest) -> Iterator[Container]:
    """SQLite with the memory queue, or PostgreSQL with Redis; the projector runs."""
    extra = {}
    if request.param == "postgres":
        redis_url = request.getfixturevalue("redis_server")
        extra = {"redis_url": redis_url, "redis_prefix": f"d{uuid.uuid4().hex[:8]}"}
    url = request.getfixturevalue(f"{request.param}_url")
    settings = load_settings(
        {}, database_url=url, test_handlers="true", projection_poll_ms="20", **extra
    )
    with bootstrap(settings) as built:
        projector = built.projector()
        projector.start()
        # A rebuild that reads runs written after it began closes their limits for a
        # while: let the first (empty) load finish before the test writes.
        wait_for(lambda: _loaded(built))
        try:
            yield built
        finally:
            projector.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 15) -> None:
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    while not condition():
        if datetime.now(UTC) > deadline:
            pytest.fail(f"not within {timeout} s")


def _loaded(container: Container) -> bool:
    meta = container.queue.read_meta()
    return meta is not None and not meta.loading


def lease_all(container: Container) -> int:
    ids = [uuid.uuid4() for _ in range(10)]
    now = datetime.now(UTC)
    return len(container.queue.lease_round(Q, lease_ids=ids, ttl=TTL, now=now).leases)


def test_a_deleted_limit_stops_holding_runs_and_a_new_one_holds_again(
    container: Container,
) -> None:
    """If a named limit allows 1 at once and is deleted while runs naming its key wait,
    then the waiting runs lease (their key has no value of its own), the log records
    the deletion with who asked, and the limit is gone from the list; defining the name
    again holds new runs to its new value."""
    services = build_services(container)
    now = datetime.now(UTC)
    services.limits.define("smtp", LimitValuesIn(concurrency=1), at=now, by=actor())
    spec = ExecutionSpec(
        handler="test.echo", queue=Q, limits=RunLimits(concurrency=ConcurrencyLimit(key="smtp"))
    )
    for _ in range(3):
        services.executions.run(spec, key=uuid.uuid4().hex, at=now, by=actor())
    wait_for(lambda: "smtp" in container.queue.named_limits())
    wait_for(lambda: container.queue.depths(Q, now=datetime.now(UTC)).ready == 3)
    assert lease_all(container) == 1

    services.limits.delete("smtp", at=now, by=actor("ops"))
    wait_for(lambda: "smtp" not in container.queue.named_limits())
    # Redis's lease step reads the named limits again within a second.
    leased = 0

    def more() -> bool:
        nonlocal leased
        leased += lease_all(container)
        return leased == 2

    wait_for(more)
    limit = container.ledger.limit(limit_id("smtp"))
    assert limit is not None
    assert limit.deleted
    events = list(container.ledger.events.get(limit_id("smtp")))
    assert isinstance(events[-1], Limit.Deleted)
    assert events[-1].by == "ops"
    assert services.limits.overview(at=now, by=actor()).limits == []

    again = services.limits.define("smtp", LimitValuesIn(concurrency=1), at=now, by=actor())
    assert again.limit.version == 3
    for _ in range(2):
        services.executions.run(spec, key=uuid.uuid4().hex, at=now, by=actor())
    wait_for(lambda: "smtp" in container.queue.named_limits())
    wait_for(lambda: container.queue.depths(Q, now=datetime.now(UTC)).ready == 2)
    # Three run with the key (leased before): none more may start.
    assert lease_all(container) == 0


def test_deleting_an_unknown_or_deleted_limit_is_not_found(container: Container) -> None:
    """If a limit nobody defined, or one deleted already, is deleted, then NotFoundError
    says so and nothing is written."""
    services = build_services(container)
    now = datetime.now(UTC)
    services.limits.define("pdf", LimitValuesIn(concurrency=2), at=now, by=actor())
    services.limits.delete("pdf", at=now, by=actor())
    before = container.ledger.recorder.max_notification_id()
    for name in ("pdf", "nope"):
        with pytest.raises(Exception, match="no limit named"):
            services.limits.delete(name, at=now, by=actor())
    assert container.ledger.recorder.max_notification_id() == before
