-- The read models behind the REST API and the dashboard, folded from the log with
-- their position (name 'read-models' in jobledger_positions) in the same transaction.
-- Times are epoch milliseconds; ids are text, as in the other projection tables. Ids
-- and names sort by code point ("C"), as in SQLite, whatever the database's locale.
CREATE TABLE IF NOT EXISTS jobledger_rm_jobs (
    id text COLLATE "C" PRIMARY KEY,
    name text COLLATE "C" NOT NULL,
    handler text NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    schedule_kind text NOT NULL,
    cron text,
    timezone text,
    run_at_ms bigint,
    status text NOT NULL,
    next_fire_at_ms bigint,
    last_fired_at_ms bigint,
    last_execution_id text,
    last_status text,
    last_finished_at_ms bigint,
    created_at_ms bigint NOT NULL,
    created_by text NOT NULL,
    updated_at_ms bigint NOT NULL,
    updated_by text,
    version integer NOT NULL,
    -- The JobDefinition as JSON (msgspec builtins), for clients that edit a job.
    definition text NOT NULL
);
-- Jobs are few (thousands): a filter narrows by index, the order by name is a sort.
CREATE INDEX IF NOT EXISTS jobledger_rm_jobs_status ON jobledger_rm_jobs (status);
CREATE INDEX IF NOT EXISTS jobledger_rm_jobs_handler ON jobledger_rm_jobs (handler);
CREATE INDEX IF NOT EXISTS jobledger_rm_jobs_queue ON jobledger_rm_jobs (queue);

CREATE TABLE IF NOT EXISTS jobledger_rm_executions (
    id text COLLATE "C" PRIMARY KEY,
    job_id text COLLATE "C",
    handler text NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    trigger text NOT NULL,
    status text NOT NULL,
    attempt integer NOT NULL,
    max_attempts integer NOT NULL,
    scheduled_for_ms bigint,
    enqueued_at_ms bigint NOT NULL,
    ready_at_ms bigint NOT NULL,
    started_at_ms bigint,
    finished_at_ms bigint,
    worker_id text,
    -- The current lease and the version of its Leased event (the key of its attempt
    -- row), so a report in a later page settles the right attempt.
    lease_id text,
    lease_seq integer,
    last_error text,
    result text,
    duration_ms double precision,
    lateness_ms double precision,
    closed_by text,
    closed_reason text,
    version integer NOT NULL
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
    execution_id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    attempt integer NOT NULL,
    worker_id text NOT NULL,
    lease_id text NOT NULL,
    started_at_ms bigint NOT NULL,
    finished_at_ms bigint,
    outcome text,
    error text,
    duration_ms double precision,
    PRIMARY KEY (execution_id, seq)
);

-- Counters per minute (of the event's time). They outlive the pruned executions.
CREATE TABLE IF NOT EXISTS jobledger_rm_minute_stats (
    minute_ms bigint PRIMARY KEY,
    fired integer NOT NULL,
    completed integer NOT NULL,
    failed integer NOT NULL,
    dead_lettered integer NOT NULL
);

-- Lateness and duration per minute as log-scale histograms: bucket i holds values
-- within a fixed relative error of one representative value (see read_models.py).
CREATE TABLE IF NOT EXISTS jobledger_rm_minute_histograms (
    minute_ms bigint NOT NULL,
    metric text COLLATE "C" NOT NULL,
    bucket integer NOT NULL,
    count integer NOT NULL,
    PRIMARY KEY (minute_ms, metric, bucket)
);

-- How many jobs and executions are in each status, changed with the rows, so that the
-- overview and the totals of lists filtered by status alone count nothing.
CREATE TABLE IF NOT EXISTS jobledger_rm_status_counts (
    kind text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    count integer NOT NULL,
    PRIMARY KEY (kind, status)
);
