-- How far a run's current (or last) attempt got, as its handler reported it: the
-- JSON of the last ExecutionProgressed (percent, message, data, at), cleared by a lease.
ALTER TABLE jobledger_rm_executions ADD COLUMN progress text;
