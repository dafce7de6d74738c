-- What a search of runs reads (ADR 107): payload_text is the run's input as JSON text,
-- cut at 2,000 characters and lower-cased; search_text is its handler, that input, its
-- result and its last error, lower-cased, which `?search=` matches any part of. NULL
-- for runs folded before the columns existed (a rebuild fills them). SQLite reads the
-- table for a search: the embedded default is for one machine's runs.
ALTER TABLE jobledger_rm_executions ADD COLUMN payload_text text;
ALTER TABLE jobledger_rm_executions ADD COLUMN search_text text;
