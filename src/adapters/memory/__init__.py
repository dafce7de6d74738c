"""The embedded mode's backends: the queue, presence and budgets in process memory."""
