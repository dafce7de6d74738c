"""A small shop that enqueues a receipt for every order and reports its sales daily."""
