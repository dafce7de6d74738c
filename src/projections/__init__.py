"""jobledger.projections layer."""
