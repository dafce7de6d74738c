-- Attempts per budget (the retry policy's max_retries + 1), so a requeue from the
-- dead-letter queue can move max_attempts on by a fresh budget. Empty in rows folded
-- before this column existed: their max_attempts still is the budget.
ALTER TABLE jobledger_rm_executions ADD COLUMN attempt_budget integer;
