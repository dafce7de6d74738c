-- The executions' index on their finish time cost every write of a row (a status
-- change is not a heap-only update: about 3 us a row on PostgreSQL) for the prune
-- alone, which now bounds the rows by their enqueue time too (ADR 70).
DROP INDEX IF EXISTS jobledger_rm_executions_finished;
