"""Lifecycle jobs run by Temporal Schedules: video expiry, orphan sweeps, CI log compaction, CI retention."""
