"""jobledger.runtime layer."""
