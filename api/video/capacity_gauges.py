"""The Prometheus gauges of each video pool's measured capacity (what ``/metrics`` shows and an
autoscaler reads)."""

from __future__ import annotations

import math

from prometheus_client import Gauge

from api.schemas.video import CapacityFigures

# The pool's key: the model version, or ``<model>.<class>`` in a deployment with GPU classes.
_LABELS = ["model"]
BACKLOG = Gauge("leasehold_video_backlog", "Generation tasks waiting for a worker (server estimate)", _LABELS)
QUEUED = Gauge("leasehold_video_queued_jobs", "Jobs waiting for a worker (from visibility)", _LABELS)
RUNNING = Gauge("leasehold_video_running_jobs", "Jobs generating now", _LABELS)
OLDEST_AGE = Gauge("leasehold_video_oldest_queued_age_seconds", "Age of the oldest waiting task", _LABELS)
DISPATCH_RATE = Gauge("leasehold_video_dispatch_rate_per_minute", "Tasks dispatched to workers per minute", _LABELS)
ADD_RATE = Gauge("leasehold_video_add_rate_per_minute", "Tasks added to the queue per minute", _LABELS)
COMPLETION_RATE = Gauge("leasehold_video_completions_per_minute", "Jobs completed per minute (5 min)", _LABELS)
WORKERS_SERVING = Gauge("leasehold_video_workers_serving", "Workers serving the model now", _LABELS)
WORKERS_POLLING = Gauge("leasehold_video_workers_polling", "Idle workers polling the model's queue", _LABELS)
MEAN_JOB_SECONDS = Gauge("leasehold_video_mean_job_seconds", "Measured mean wall time of one job", _LABELS)
WORKERS_NEEDED = Gauge(
    "leasehold_video_workers_needed", "Workers that Little's law says meet the target queue wait", _LABELS
)
EXPECTED_WAIT = Gauge("leasehold_video_expected_wait_seconds", "Expected queue wait of a new job", ["model", "tier"])


def export_figures(model: str, figures: CapacityFigures) -> None:
    """Set the pool's gauges to ``figures``."""
    # The label is the pool's key: the model, or ``<model>.<class>`` with GPU classes.
    BACKLOG.labels(model).set(figures.backlog)
    QUEUED.labels(model).set(figures.queued)
    RUNNING.labels(model).set(figures.running)
    OLDEST_AGE.labels(model).set(figures.oldest_queued_age_seconds)
    DISPATCH_RATE.labels(model).set(figures.dispatch_rate_per_minute)
    ADD_RATE.labels(model).set(figures.add_rate_per_minute)
    COMPLETION_RATE.labels(model).set(figures.completion_rate_per_minute)
    WORKERS_SERVING.labels(model).set(figures.workers_serving)
    WORKERS_POLLING.labels(model).set(figures.workers_polling)
    MEAN_JOB_SECONDS.labels(model).set(figures.mean_job_seconds or 0.0)
    WORKERS_NEEDED.labels(model).set(figures.workers_needed)
    for tier, wait in figures.expected_wait_seconds.items():
        # No worker: the wait is unbounded (+Inf), which an autoscaler reads as "scale up".
        EXPECTED_WAIT.labels(model, tier).set(math.inf if wait is None else wait)
