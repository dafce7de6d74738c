"""Redis: the queue, its keys and Lua scripts, presence, leadership, breakers, budgets."""
