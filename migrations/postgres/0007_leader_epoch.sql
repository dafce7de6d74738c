-- The leader epoch counter, durable beside the log: every new leader takes the next
-- value, so epochs never go backwards when Redis loses its data (ADR 9, amended).
-- It starts above the highest epoch any JobFired in the log already carries.
CREATE TABLE IF NOT EXISTS jobledger_leader_epoch (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch bigint NOT NULL CHECK (epoch >= 0)
);
INSERT INTO jobledger_leader_epoch (epoch)
SELECT coalesce(max((convert_from(state, 'UTF8')::jsonb ->> 'leader_epoch')::bigint), 0)
FROM jobledger_events
WHERE topic = 'jobledger:JobFired' AND get_byte(state, 0) = 123  -- plain JSON states only
ON CONFLICT DO NOTHING;
