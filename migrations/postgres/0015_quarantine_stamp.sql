-- A counter that moves with every change of jobledger_quarantine (ADR 52). Followers
-- read it in the statement that reads their page of the log, and read the quarantine
-- itself again only when it moved, instead of once per page.
CREATE TABLE IF NOT EXISTS jobledger_quarantine_stamp (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    stamp bigint NOT NULL
);
INSERT INTO jobledger_quarantine_stamp (only_row, stamp) VALUES (true, 0)
    ON CONFLICT (only_row) DO NOTHING;
CREATE OR REPLACE FUNCTION jobledger_quarantine_touched() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobledger_quarantine_stamp SET stamp = stamp + 1;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS jobledger_quarantine_touched ON jobledger_quarantine;
CREATE TRIGGER jobledger_quarantine_touched
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON jobledger_quarantine
    FOR EACH STATEMENT EXECUTE FUNCTION jobledger_quarantine_touched();
