-- The token whose credential minted this one (none: minted in a session or by the
-- operator's tools). A child never outlives its parent, and revoking a token revokes
-- every token minted from it, down the tree.
ALTER TABLE jobledger_api_tokens ADD COLUMN parent_id text;
CREATE INDEX IF NOT EXISTS jobledger_api_tokens_parent ON jobledger_api_tokens (parent_id);
