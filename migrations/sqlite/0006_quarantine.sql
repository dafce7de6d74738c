-- Events a follower could not apply (src/projections/quarantine.py): one row per
-- follower and log position, until a retry applies it.
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
    UNIQUE (follower, position)
);
CREATE INDEX IF NOT EXISTS jobledger_quarantine_stream
    ON jobledger_quarantine (follower, originator_id);
