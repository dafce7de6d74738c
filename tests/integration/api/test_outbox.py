"""Enqueue inside the application's own transaction: a rollback leaves no run, a commit
runs it once, whatever the relay did before (PostgreSQL, a live API, a worker and the
scheduler's outbox relay)."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec
import psycopg
import pytest
from structlog.testing import capture_logs
from tests.integration.api.conftest import serve_api, worker_for

from jobledger.bootstrap import build_services
from jobledger.client import Client, enqueue_in_transaction
from jobledger.domain.errors import NotFoundError
from jobledger.domain.execution import Execution, trigger_execution_id
from jobledger.domain.roles import Role
from jobledger.infra.outages import POSTGRESQL
from jobledger.runtime.relay import relay_part
from jobledger.schemas.executions import UniqueIn
from jobledger.schemas.outbox import OUTBOX_INSERT
from jobledger.services.outbox import Outbox

if TYPE_CHECKING:
    from tests.conftest import LiveServer
    from tests.integration.api.conftest import Api


class OrderFailedError(Exception):
    """The application's transaction fails after the enqueue."""


@pytest.fixture(scope="module")
def served(
    module_postgres_url: str, redis_server: str, live_server: type["LiveServer"]
) -> Iterator["Api"]:
    with (
        serve_api(
            module_postgres_url, redis_server, live_server, handlers="tests.integration.code_jobs"
        ) as api,
        worker_for(api),
    ):
        yield api


@pytest.fixture
def outbox(served: "Api") -> Outbox:
    made = build_services(served.container).outbox
    assert made is not None
    return made


def _rows(url: str) -> list[tuple[str, str | None]]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT idempotency_key, refused FROM jobledger_outbox ORDER BY id"
        ).fetchall()
    return [(str(key), refused) for key, refused in found]


def _place_order(conn: psycopg.Connection[tuple[object, ...]], enqueued: list[uuid.UUID]) -> None:
    """An order saved and its receipt enqueued, in one transaction that then fails."""
    with conn.transaction():
        conn.execute("CREATE TEMP TABLE orders (id int)")
        enqueued.append(enqueue_in_transaction(conn, "tests.answer"))
        raise OrderFailedError


def test_a_rolled_back_enqueue_leaves_no_run(
    served: "Api", outbox: Outbox, module_postgres_url: str
) -> None:
    """If the application's transaction rolls back after an enqueue, then the outbox
    has no row and no run ever exists, however often the relay looks."""
    with psycopg.connect(module_postgres_url) as conn:
        enqueued: list[uuid.UUID] = []
        with pytest.raises(OrderFailedError):
            _place_order(conn, enqueued)
        assert conn.execute("SELECT to_regclass('orders')").fetchone() == (None,)
    [execution_id] = enqueued
    assert outbox.relay(at=_now()).taken == 0
    assert _rows(module_postgres_url) == []
    with pytest.raises(NotFoundError):
        served.container.ledger.get_execution(execution_id)


def test_a_committed_enqueue_runs_once(
    served: "Api", outbox: Outbox, module_postgres_url: str
) -> None:
    """If the application commits an enqueue, then the running relay (woken by the
    commit) turns it into a run that completes with its result; the same key committed
    again, as after a relay that died before deleting its row, is not a second run."""
    container = served.container
    relay = relay_part(outbox, container.listen(), container.health.watch(POSTGRESQL))
    assert relay is not None
    relay.start()
    key = f"order-{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(module_postgres_url) as conn, conn.transaction():
            execution_id = enqueue_in_transaction(
                conn, "billing.send_invoice", {"customer": "acme", "amount": 7}, idempotency_key=key
            )
        with Client(served.url, served.tokens[Role.VIEWER]) as client:
            result = client.wait(execution_id, timeout=30)
            assert result == {"sent_to": "acme", "amount": 7, "currency": "EUR"}
            with psycopg.connect(module_postgres_url) as conn, conn.transaction():
                assert enqueue_in_transaction(conn, "billing.send_invoice",
                                              {"customer": "acme", "amount": 7},
                                              idempotency_key=key) == execution_id  # fmt: skip
            served.wait_for(lambda: _rows(module_postgres_url) == [])
            assert client.get_execution(execution_id).execution.status == "completed"
    finally:
        relay.stop()
    events = list(served.container.ledger.history(execution_id))
    assert [type(e) for e in events].count(Execution.Enqueued) == 1
    assert [type(e) for e in events].count(Execution.Completed) == 1


def test_a_run_the_server_refuses_stays_with_its_error(
    served: "Api", outbox: Outbox, module_postgres_url: str
) -> None:
    """If a committed row names a handler the workers do not have, or a payload its
    struct refuses, then the relay keeps the row with the error and makes no run."""
    with psycopg.connect(module_postgres_url) as conn, conn.transaction():
        unknown = enqueue_in_transaction(conn, "billing.nope", idempotency_key="r1")
        wrong = enqueue_in_transaction(
            conn, "billing.send_invoice", {"amount": 1}, idempotency_key="r2"
        )
    report = outbox.relay(at=_now())
    assert (report.enqueued, report.refused) == (0, 2)
    rows = dict(_rows(module_postgres_url))
    assert "not a registered handler" in (rows["r1"] or "")
    assert "payload.customer" in (rows["r2"] or "")
    assert outbox.relay(at=_now()).taken == 0  # not tried again
    for execution_id in (unknown, wrong):
        with pytest.raises(NotFoundError):
            served.container.ledger.get_execution(execution_id)
    with psycopg.connect(module_postgres_url) as conn:
        conn.execute("DELETE FROM jobledger_outbox")


def test_a_run_the_api_would_refuse_is_refused_on_both_sides(
    outbox: Outbox, module_postgres_url: str
) -> None:
    """If a run gives both run_at and a delay, or a unique key, then the client refuses
    it before writing, and a row written by other means is kept with the error by the
    relay, as POST /api/v1/executions refuses such a run."""
    with psycopg.connect(module_postgres_url) as conn, conn.transaction():
        with pytest.raises(ValueError, match="not both"):
            enqueue_in_transaction(conn, "billing.send_invoice", run_at=_now(), delay=5)
        with pytest.raises(ValueError, match="no unique runs"):
            enqueue_in_transaction(conn, "billing.send_invoice", unique=UniqueIn(key="k"))
        body = {"handler": "test.echo", "run_at": _now().isoformat(), "delay_seconds": 5}
        conn.execute(OUTBOX_INSERT, ("both", msgspec.json.encode(body).decode()))
    report = outbox.relay(at=_now())
    assert (report.enqueued, report.refused) == (0, 1)
    assert "delay_seconds" in (dict(_rows(module_postgres_url))["both"] or "")
    with psycopg.connect(module_postgres_url) as conn:
        conn.execute("DELETE FROM jobledger_outbox")


def test_a_row_that_fails_any_way_is_refused_and_the_rows_behind_it_run(
    outbox: Outbox, module_postgres_url: str
) -> None:
    """If a row written by other means holds a run nested 100,000 levels deep (which
    no check names: the decoder gives up), then the relay keeps that row with its
    error, logs it with the row's id, and enqueues the row behind it in the same pass;
    the next pass takes nothing."""
    deep = '{"handler": "test.echo", "payload": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    good = msgspec.json.encode({"handler": "test.echo", "payload": {"n": 1}}).decode()
    with psycopg.connect(module_postgres_url) as conn, conn.transaction():
        conn.execute(OUTBOX_INSERT, ("deep", deep))
        conn.execute(OUTBOX_INSERT, ("behind", good))
        row_id = conn.execute("SELECT min(id) FROM jobledger_outbox").fetchone()
    with capture_logs() as logs:
        report = outbox.relay(at=_now())
    assert (report.enqueued, report.refused) == (1, 1)
    assert "RecursionError" in (dict(_rows(module_postgres_url))["deep"] or "")
    [refused] = [e for e in logs if e["event"] == "outbox.refused"]
    assert (refused["row"], refused["idempotency_key"]) == (row_id and row_id[0], "deep")
    behind = outbox.ledger.get_execution(trigger_execution_id(None, "behind"))
    assert behind.spec.payload == {"n": 1}
    assert outbox.relay(at=_now()).taken == 0
    with psycopg.connect(module_postgres_url) as conn:
        conn.execute("DELETE FROM jobledger_outbox")


def _now() -> datetime:
    return datetime.now(tz=UTC)
