-- Events a follower could not apply (src/projections/quarantine.py): one row per
-- follower and log position, until a retry applies it or an operator drops it.
CREATE TABLE IF NOT EXISTS jobledger_quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    follower TEXT NOT NULL,
    position INTEGER NOT NULL,
    originator_id TEXT NOT NULL,
    originator_version INTEGER NOT NULL,
    topic TEXT NOT NULL,
    error TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    -- Set when an operator gives up on the event (the follower goes on without it).
    dropped_at_ms INTEGER,
    dropped_by TEXT,
    dropped_reason TEXT,
    UNIQUE (follower, position)
);
CREATE INDEX IF NOT EXISTS jobledger_quarantine_stream
    ON jobledger_quarantine (follower, originator_id);
