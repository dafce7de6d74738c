"""jobledger: a cron-capable job scheduler whose source of truth is an event log."""
