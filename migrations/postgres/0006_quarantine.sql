-- Events a follower could not apply (src/projections/quarantine.py): one row per
-- follower and log position, until a retry applies it.
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
    UNIQUE (follower, position)
);
CREATE INDEX IF NOT EXISTS jobledger_quarantine_stream
    ON jobledger_quarantine (follower, originator_id);
