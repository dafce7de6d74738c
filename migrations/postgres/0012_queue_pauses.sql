-- Each queue's pause as the queue projection folds it from the Queue aggregate's
-- events, kept beside the open executions and committed with the same position, so a
-- queue rebuilt from the checkpoint is paused where the log says it is.
CREATE TABLE IF NOT EXISTS jobledger_queue_pauses (
    queue text PRIMARY KEY,
    -- The Queue aggregate's version: an older record never replaces a newer one.
    version integer NOT NULL,
    -- The record as the queue backends store it (msgpack QueuePause).
    record bytea NOT NULL
);
