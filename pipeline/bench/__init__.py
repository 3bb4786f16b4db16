"""One execution inside its job: distributed setup, the timed layers, diagnostics, the shard."""
