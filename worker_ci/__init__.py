"""The CI worker process: runs jobs in sandboxes on leased workers."""
