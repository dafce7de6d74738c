-- One row naming this event store, so a projection that keeps its position elsewhere
-- (Redis) can tell that it still follows the same log.
CREATE TABLE IF NOT EXISTS jobledger_store (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    store_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO jobledger_store (store_id) VALUES (gen_random_uuid()) ON CONFLICT DO NOTHING;
