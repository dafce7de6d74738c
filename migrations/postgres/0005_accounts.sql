-- Accounts for the REST API. Plain tables, not events: they hold secrets (hashes) that
-- must be deleted for real, and a session or a throttle counter is not history (ADR 13).
-- Times are epoch milliseconds.
CREATE TABLE IF NOT EXISTS jobledger_users (
    id text PRIMARY KEY,
    -- Stored lower-case, so uniqueness is case-insensitive.
    username text NOT NULL UNIQUE CHECK (username = lower(username)),
    password_hash text NOT NULL,
    role text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    disabled boolean NOT NULL DEFAULT false,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    password_changed_at bigint NOT NULL
);
-- id is the sha256 of the session token: the database never holds a usable token.
CREATE TABLE IF NOT EXISTS jobledger_sessions (
    id text PRIMARY KEY,
    user_id text NOT NULL REFERENCES jobledger_users (id) ON DELETE CASCADE,
    csrf_token text NOT NULL,
    created_at bigint NOT NULL,
    last_seen_at bigint NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_sessions_user ON jobledger_sessions (user_id);
CREATE INDEX IF NOT EXISTS jobledger_sessions_expiry ON jobledger_sessions (expires_at);
CREATE TABLE IF NOT EXISTS jobledger_api_tokens (
    id text PRIMARY KEY,
    name text NOT NULL,
    token_hash text NOT NULL UNIQUE,
    user_id text NOT NULL REFERENCES jobledger_users (id) ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at bigint NOT NULL,
    expires_at bigint,
    revoked_at bigint,
    last_used_at bigint
);
CREATE INDEX IF NOT EXISTS jobledger_api_tokens_user ON jobledger_api_tokens (user_id);
-- One row per failed login and bucket ("user:alice", "addr:192.0.2.1"); rows older
-- than the throttle window are pruned.
CREATE TABLE IF NOT EXISTS jobledger_login_failures (
    key text NOT NULL,
    at_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS jobledger_login_failures_key ON jobledger_login_failures (key, at_ms);
CREATE INDEX IF NOT EXISTS jobledger_login_failures_at ON jobledger_login_failures (at_ms);
