"""Replicate's predictions API over leasehold's video jobs (``api.routers.replicate``)."""
