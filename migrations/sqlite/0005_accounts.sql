-- Accounts for the REST API. Plain tables, not events: they hold secrets (hashes) that
-- must be deleted for real, and a session or a throttle counter is not history (ADR 13).
-- Times are epoch milliseconds. SQLite does not enforce the foreign keys (the pragma is
-- off), so deleting a user deletes its sessions and tokens explicitly.
CREATE TABLE IF NOT EXISTS jobledger_users (
    id TEXT PRIMARY KEY,
    -- Stored lower-case, so uniqueness is case-insensitive.
    username TEXT NOT NULL UNIQUE CHECK (username = lower(username)),
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    disabled INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    password_changed_at INTEGER NOT NULL
);
-- id is the sha256 of the session token: the database never holds a usable token.
CREATE TABLE IF NOT EXISTS jobledger_sessions (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES jobledger_users (id) ON DELETE CASCADE,
    csrf_token TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_sessions_user ON jobledger_sessions (user_id);
CREATE INDEX IF NOT EXISTS jobledger_sessions_expiry ON jobledger_sessions (expires_at);
CREATE TABLE IF NOT EXISTS jobledger_api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL REFERENCES jobledger_users (id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER,
    last_used_at INTEGER
);
CREATE INDEX IF NOT EXISTS jobledger_api_tokens_user ON jobledger_api_tokens (user_id);
-- One row per failed login and bucket ("user:alice", "addr:192.0.2.1"); rows older
-- than the throttle window are pruned.
CREATE TABLE IF NOT EXISTS jobledger_login_failures (
    key TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_login_failures_key ON jobledger_login_failures (key, at_ms);
CREATE INDEX IF NOT EXISTS jobledger_login_failures_at ON jobledger_login_failures (at_ms);
