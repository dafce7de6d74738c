-- Events a follower could not apply (src/projections/quarantine.py): one row per
-- follower and log position, until a retry applies it or an operator drops it.
CREATE TABLE IF NOT EXISTS jobledger_quarantine (
    id bigserial PRIMARY KEY,
    follower text NOT NULL,
    position bigint NOT NULL,
    originator_id text NOT NULL,
    originator_version integer NOT NULL,
    topic text NOT NULL,
    error text NOT NULL,
    first_seen_ms bigint NOT NULL,
    last_seen_ms bigint NOT NULL,
    attempts integer NOT NULL,
    -- Set when an operator gives up on the event (the follower goes on without it).
    dropped_at_ms bigint,
    dropped_by text,
    dropped_reason text,
    UNIQUE (follower, position)
);
CREATE INDEX IF NOT EXISTS jobledger_quarantine_stream
    ON jobledger_quarantine (follower, originator_id);
