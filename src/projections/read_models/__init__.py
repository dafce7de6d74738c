"""The read models behind the REST API and the dashboard: tables, follower, rebuilds, queries."""
