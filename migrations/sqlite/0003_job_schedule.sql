-- When each job fires next, folded from the job events with its position (in the same
-- transaction): the scheduler asks it for due jobs instead of scanning the log.
CREATE TABLE IF NOT EXISTS jobledger_job_schedule (
    job_id TEXT PRIMARY KEY,
    next_fire_at_ms INTEGER,
    version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_job_schedule_due
    ON jobledger_job_schedule (next_fire_at_ms);
