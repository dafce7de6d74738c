-- Open executions as the queue projection folds them, kept in the database with the
-- position they were folded to (in the same transaction), so the queue can be
-- rebuilt from the open executions instead of from all history.
CREATE TABLE IF NOT EXISTS jobledger_open_executions (
    execution_id TEXT PRIMARY KEY,
    job_id TEXT,
    queue TEXT NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL,
    lease_id TEXT,
    -- The due score of the entry's time (ms, rounded up), as the queue's sorted sets use.
    score INTEGER NOT NULL,
    -- The entry as the Redis queue stores it (msgpack), so a rebuild copies it verbatim.
    item BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_open_executions_job ON jobledger_open_executions (job_id);
CREATE TABLE IF NOT EXISTS jobledger_positions (
    name TEXT PRIMARY KEY,
    position INTEGER NOT NULL
);
