-- The leader epoch counter, durable beside the log: every process that starts to fire
-- takes the next value, so epochs in the log never go backwards (ADR 9, amended).
-- It starts above the highest epoch any JobFired in the log already carries.
CREATE TABLE IF NOT EXISTS jobledger_leader_epoch (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    epoch INTEGER NOT NULL CHECK (epoch >= 0)
);
INSERT OR IGNORE INTO jobledger_leader_epoch (singleton, epoch)
SELECT 1, coalesce(max(CAST(json_extract(CAST(state AS TEXT), '$.leader_epoch') AS INTEGER)), 0)
FROM stored_events
WHERE topic = 'jobledger:JobFired' AND json_valid(CAST(state AS TEXT));
