"""The use cases: one home for every command and query that the API, the dashboard and
the CLI offer. Each takes plain arguments and the actor, decides the write path, and
raises domain or service errors; the callers only translate in and out."""
