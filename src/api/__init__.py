"""jobledger.api layer."""
