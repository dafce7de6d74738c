-- Open executions as the queue projection folds them, kept in the database with the
-- position they were folded to (in the same transaction), so the Redis queue can be
-- rebuilt from the open executions instead of from all history.
CREATE TABLE IF NOT EXISTS jobledger_open_executions (
    execution_id text PRIMARY KEY,
    job_id text,
    queue text NOT NULL,
    version integer NOT NULL,
    state text NOT NULL,
    priority smallint NOT NULL,
    lease_id text,
    -- The due score of the entry's time (ms, rounded up), as the queue's sorted sets use.
    score bigint NOT NULL,
    -- The entry as the Redis queue stores it (msgpack), so a rebuild copies it verbatim.
    item bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_open_executions_job ON jobledger_open_executions (job_id);
CREATE TABLE IF NOT EXISTS jobledger_positions (
    name text PRIMARY KEY,
    position bigint NOT NULL
);
