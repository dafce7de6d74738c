-- Who asked for a run and how they came (ExecutionEnqueued's by and via: "session",
-- "token:<name>", "cli", "outbox"), and how whoever requeued, cancelled or discarded it
-- last came (beside closed_by). NULL for runs the schedule or the system made, and for
-- runs enqueued before the events recorded them.
ALTER TABLE jobledger_rm_executions ADD COLUMN enqueued_by text;
ALTER TABLE jobledger_rm_executions ADD COLUMN enqueued_via text;
ALTER TABLE jobledger_rm_executions ADD COLUMN closed_via text;
