"""The names an enqueue inside the application's transaction writes to: the outbox
table, its columns and the channel the relay listens on (ADR "transactional
enqueue"). The client writes rows; the server's relay reads them."""

OUTBOX_TABLE = "jobledger_outbox"
OUTBOX_CHANNEL = "jobledger_outbox"
# The row: the run's idempotency key, and the run as a RunIn body (JSON text).
OUTBOX_INSERT = f"INSERT INTO {OUTBOX_TABLE} (idempotency_key, run) VALUES (%s, %s)"  # noqa: S608 (constant names)
