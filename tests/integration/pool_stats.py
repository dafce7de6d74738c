"""What the event store's connection pool was asked for, for tests of the connections
that hot paths keep."""

from jobledger.persistence.ledger import Ledger


def pool_requests(ledger: Ledger) -> int:
    """How often the pool of ``ledger``'s PostgreSQL store was asked for a connection."""
    datastore = ledger.recorder.datastore  # type: ignore[attr-defined] # PostgreSQL's recorder
    return int(datastore.pool.get_stats().get("requests_num", 0))
