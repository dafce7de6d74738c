-- Archives of closed executions' history (ADR 45): one row per archive file, written
-- in the transaction that removed its events from the log and recorded HistoryArchived.
CREATE TABLE IF NOT EXISTS jobledger_archives (
    name text COLLATE "C" PRIMARY KEY,
    -- Where the archive's two files are (a folder), as it was when the archive was made.
    location text NOT NULL,
    first_position bigint NOT NULL,
    last_position bigint NOT NULL,
    executions integer NOT NULL,
    events integer NOT NULL,
    sha256 text NOT NULL,
    manifest_sha256 text NOT NULL,
    archived_at_ms bigint NOT NULL
);
-- Which archive holds each archived execution: the history routes answer from it.
CREATE TABLE IF NOT EXISTS jobledger_archived_executions (
    execution_id text COLLATE "C" PRIMARY KEY,
    archive text COLLATE "C" NOT NULL
);
