-- The read models behind the REST API and the dashboard, folded from the log with
-- their position (name 'read-models' in jobledger_positions) in the same transaction.
-- Times are epoch milliseconds; ids are TEXT, as in the other projection tables.
-- TEXT sorts by code point (BINARY), as the PostgreSQL tables do.
CREATE TABLE IF NOT EXISTS jobledger_rm_jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    handler TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    schedule_kind TEXT NOT NULL,
    cron TEXT,
    timezone TEXT,
    run_at_ms INTEGER,
    status TEXT NOT NULL,
    next_fire_at_ms INTEGER,
    last_fired_at_ms INTEGER,
    last_execution_id TEXT,
    last_status TEXT,
    last_finished_at_ms INTEGER,
    created_at_ms INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    updated_by TEXT,
    version INTEGER NOT NULL,
    -- The JobDefinition as JSON (msgspec builtins), for clients that edit a job.
    definition TEXT NOT NULL
);
-- Jobs are few (thousands): a filter narrows by index, the order by name is a sort.
CREATE INDEX IF NOT EXISTS jobledger_rm_jobs_status ON jobledger_rm_jobs (status);
CREATE INDEX IF NOT EXISTS jobledger_rm_jobs_handler ON jobledger_rm_jobs (handler);
CREATE INDEX IF NOT EXISTS jobledger_rm_jobs_queue ON jobledger_rm_jobs (queue);

CREATE TABLE IF NOT EXISTS jobledger_rm_executions (
    id TEXT PRIMARY KEY,
    job_id TEXT,
    handler TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    scheduled_for_ms INTEGER,
    enqueued_at_ms INTEGER NOT NULL,
    ready_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    finished_at_ms INTEGER,
    worker_id TEXT,
    -- The current lease and the version of its Leased event (the key of its attempt
    -- row), so a report in a later page settles the right attempt.
    lease_id TEXT,
    lease_seq INTEGER,
    last_error TEXT,
    result TEXT,
    duration_ms REAL,
    lateness_ms REAL,
    closed_by TEXT,
    closed_reason TEXT,
    version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_enqueued
    ON jobledger_rm_executions (enqueued_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_status
    ON jobledger_rm_executions (status, enqueued_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_job
    ON jobledger_rm_executions (job_id, enqueued_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_queue
    ON jobledger_rm_executions (queue, enqueued_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_handler
    ON jobledger_rm_executions (handler, enqueued_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_finished
    ON jobledger_rm_executions (finished_at_ms);
CREATE INDEX IF NOT EXISTS jobledger_rm_executions_dead
    ON jobledger_rm_executions (finished_at_ms, id) WHERE status = 'dead_lettered';

-- One row per lease (a deferral is a lease too, though not a counted attempt): seq is
-- the version of its ExecutionLeased event.
CREATE TABLE IF NOT EXISTS jobledger_rm_attempts (
    execution_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    lease_id TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER,
    outcome TEXT,
    error TEXT,
    duration_ms REAL,
    PRIMARY KEY (execution_id, seq)
);

-- Counters per minute (of the event's time). They outlive the pruned executions.
CREATE TABLE IF NOT EXISTS jobledger_rm_minute_stats (
    minute_ms INTEGER PRIMARY KEY,
    fired INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    dead_lettered INTEGER NOT NULL
);

-- Lateness and duration per minute as log-scale histograms: bucket i holds values
-- within a fixed relative error of one representative value (see read_models.py).
CREATE TABLE IF NOT EXISTS jobledger_rm_minute_histograms (
    minute_ms INTEGER NOT NULL,
    metric TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (minute_ms, metric, bucket)
);

-- How many jobs and executions are in each status, changed with the rows, so that the
-- overview and the totals of lists filtered by status alone count nothing.
CREATE TABLE IF NOT EXISTS jobledger_rm_status_counts (
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (kind, status)
);
