-- Each named limit as the queue projection folds it from the Limit aggregate's events,
-- kept beside the open executions and committed with the same position, so a queue
-- rebuilt from the checkpoint enforces what the log says.
CREATE TABLE IF NOT EXISTS jobledger_queue_limits (
    name TEXT PRIMARY KEY,
    -- The Limit aggregate's version: an older record never replaces a newer one.
    version INTEGER NOT NULL,
    -- The record as the queue backends store it (msgpack NamedLimit).
    record BLOB NOT NULL
);
