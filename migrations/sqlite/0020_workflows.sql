-- One row per workflow (an ad-hoc DAG of steps), folded from the Workflow aggregate's
-- events by the read models' follower, for the workflow lists of the API and the
-- dashboard. steps_* count its steps in each state; times are epoch milliseconds;
-- started_by and started_via say who started it and how they came. Workflows started
-- before this table existed are folded into it by a rebuild of the read models
-- (`jobledger projections rebuild`).
CREATE TABLE IF NOT EXISTS jobledger_rm_workflows (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    on_failure TEXT NOT NULL,
    steps_total INTEGER NOT NULL,
    steps_waiting INTEGER NOT NULL,
    steps_released INTEGER NOT NULL,
    steps_completed INTEGER NOT NULL,
    steps_failed INTEGER NOT NULL,
    steps_cancelled INTEGER NOT NULL,
    steps_skipped INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    started_by TEXT NOT NULL,
    started_via TEXT,
    version INTEGER NOT NULL
);
-- The list is newest first, filtered by status or by name (or neither).
CREATE INDEX IF NOT EXISTS jobledger_rm_workflows_started
    ON jobledger_rm_workflows (started_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_workflows_status
    ON jobledger_rm_workflows (status, started_at_ms, id);
CREATE INDEX IF NOT EXISTS jobledger_rm_workflows_name
    ON jobledger_rm_workflows (name, started_at_ms, id);
