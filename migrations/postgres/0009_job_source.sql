-- Who defines a job: 'api' (people, over the API or the dashboard) or 'code' (a job
-- that `jobledger apply` manages). Rows folded before this column existed were all
-- defined over the API.
ALTER TABLE jobledger_rm_jobs ADD COLUMN source text NOT NULL DEFAULT 'api';
