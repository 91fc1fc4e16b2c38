"""Lifecycle jobs of CI: log compaction and retention."""
