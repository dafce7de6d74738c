"""The names an enqueue inside the application's transaction writes to: the outbox
table, its columns and the channel the relay listens on (ADR "transactional
enqueue"), and a row as the relay takes it. The client writes rows; the server's relay
reads them."""

import msgspec

OUTBOX_TABLE = "jobledger_outbox"
OUTBOX_CHANNEL = "jobledger_outbox"
# The row: the run's idempotency key, and the run as a RunIn body (JSON text).
OUTBOX_INSERT = f"INSERT INTO {OUTBOX_TABLE} (idempotency_key, run) VALUES (%s, %s)"  # noqa: S608 (constant names)


class OutboxRow(msgspec.Struct, frozen=True):
    """A row as the relay takes it: its id (the order rows came in), the run's
    idempotency key, and the run as a RunIn body (JSON text)."""

    id: int
    key: str
    run: str
