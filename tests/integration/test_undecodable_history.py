"""An undecodable stored event in a history, on SQLite (the embedded mode) and
PostgreSQL: a placeholder where it sits, its log position, a clear error on rebuild."""

import pytest
from tests.integration.api.test_quarantine import enqueue
from tests.integration.raw_events import write_undecodable

from jobledger.domain.errors import UndecodableEventError
from jobledger.domain.execution import Execution
from jobledger.persistence.ledger import Ledger
from jobledger.persistence.log_store import LivePage
from jobledger.persistence.undecodable import UndecodableEvent


def test_a_history_holds_a_placeholder_at_the_events_position(ledger: Ledger) -> None:
    """If an execution's second event no longer decodes, then its history holds the
    first event and a placeholder for the second, the stream's log positions are the
    log's own, and rebuilding the execution raises an error naming that version."""
    execution_id = enqueue(ledger, {"n": 1})
    write_undecodable(ledger, Execution.Leased.TOPIC, execution_id, version=2)

    first, second = ledger.history_of(Execution, execution_id)
    assert isinstance(first, Execution.Enqueued)
    assert isinstance(second, UndecodableEvent)
    assert (second.originator_id, second.originator_version) == (execution_id, 2)
    assert second.type == "ExecutionLeased"
    assert "Object missing required field" in second.error

    rows = ledger.log_store.read_rows(0, LivePage(10)).rows
    logged = {row[2]: row[0] for row in rows if str(row[1]) == str(execution_id)}
    assert ledger.log_store.positions(execution_id) == logged == {1: 1, 2: 2}

    with pytest.raises(UndecodableEventError, match=r"its event v2 .*quarantine list") as raised:
        ledger.get_execution(execution_id)
    assert raised.value.version == 2
