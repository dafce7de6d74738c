-- What a search of runs reads (ADR 107): payload_text is the run's input as JSON text,
-- cut at 2,000 characters and lower-cased; search_text is its handler, that input, its
-- result and its last error, lower-cased, which `?search=` matches any part of. The
-- read models' fold keeps both; runs folded before they existed have NULL (a rebuild
-- fills them). The trigram index lets a search for part of the text use an index: it
-- needs the pg_trgm extension, which a database owner may create (it is trusted); where
-- it cannot be created, searches read the table instead, and work as before.
ALTER TABLE jobledger_rm_executions ADD COLUMN IF NOT EXISTS payload_text text;
ALTER TABLE jobledger_rm_executions ADD COLUMN IF NOT EXISTS search_text text;
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pg_trgm could not be created: searches of runs read the table';
END
$$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX IF NOT EXISTS jobledger_rm_executions_search
            ON jobledger_rm_executions USING gin (search_text gin_trgm_ops);
    END IF;
END
$$;
