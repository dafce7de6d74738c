-- Runs enqueued inside an application's own transaction
-- (jobledger.client.enqueue_in_transaction): a commit publishes the row, a rollback
-- drops it, and the outbox relay of a scheduler turns each into its ExecutionEnqueued
-- and deletes it. A row the server refused keeps its error in `refused`.
CREATE TABLE IF NOT EXISTS jobledger_outbox (
    id bigserial PRIMARY KEY,
    idempotency_key text NOT NULL,
    run text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    refused text
);
CREATE INDEX IF NOT EXISTS jobledger_outbox_waiting ON jobledger_outbox (id) WHERE refused IS NULL;
