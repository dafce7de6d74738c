-- Why a pending run waits, as its last event said: a back-off after a failed attempt,
-- a deferral by an open breaker, a snooze, or a limit it waited for. NULL once it is
-- leased or requeued, and for runs folded before the column existed (a rebuild fills
-- it). The API and the pages add what only the moment knows (a paused queue, no worker).
ALTER TABLE jobledger_rm_executions ADD COLUMN waiting text;
