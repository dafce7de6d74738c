-- Archives of closed executions' history (ADR 45): one row per archive file, written
-- in the transaction that removed its events from the log and recorded HistoryArchived.
CREATE TABLE IF NOT EXISTS jobledger_archives (
    name TEXT PRIMARY KEY,
    -- Where the archive's two files are (a folder), as it was when the archive was made.
    location TEXT NOT NULL,
    first_position INTEGER NOT NULL,
    last_position INTEGER NOT NULL,
    executions INTEGER NOT NULL,
    events INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    archived_at_ms INTEGER NOT NULL
);
-- Which archive holds each archived execution: the history routes answer from it.
CREATE TABLE IF NOT EXISTS jobledger_archived_executions (
    execution_id TEXT PRIMARY KEY,
    archive TEXT NOT NULL
);
