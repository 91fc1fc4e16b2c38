"""The GPU worker process: loads one model version and polls its queue."""
