"""The orchestration worker: runs every workflow and the light housekeeping activities."""
