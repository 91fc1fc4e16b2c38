"""Lifecycle jobs of video: expiry and orphan sweeps."""
