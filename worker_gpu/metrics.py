"""Prometheus metrics of a GPU worker (served on its /metrics endpoint)."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

MODEL_INFO = Gauge(
    "leasehold_gpu_model_loaded", "The model version this worker serves (1 = loaded)", ["model", "device"]
)
GENERATION_ACTIVE = Gauge("leasehold_gpu_generation_active", "1 while a generation runs on this worker")
STEPS = Counter("leasehold_gpu_steps_total", "Sampler steps run")
STEPS_PER_SECOND = Gauge("leasehold_gpu_steps_per_second", "Sampler steps per second over the last step")
CHECKPOINTS = Counter("leasehold_gpu_checkpoints_written_total", "Checkpoints committed to the object store")
CHECKPOINT_SECONDS = Histogram(
    "leasehold_gpu_checkpoint_seconds",
    "Time to serialize, upload and commit one checkpoint",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHECKPOINT_BYTES = Gauge("leasehold_gpu_checkpoint_bytes", "Size of the last checkpoint")
RESUMED_FROM_STEP = Gauge("leasehold_gpu_resumed_from_step", "Step the current generation resumed from")
GENERATIONS = Counter("leasehold_gpu_generations_total", "Generation attempts by outcome", ["outcome"])
LAST_STEP_AT = Gauge("leasehold_gpu_last_step_timestamp_seconds", "When the last sampler step finished")


class PrometheusObserver:
    """``GenerationObserver`` that feeds the metrics above."""

    def generation_started(self, job_id: str, attempt: int, resumed_from_step: int) -> None:
        GENERATION_ACTIVE.set(1)
        RESUMED_FROM_STEP.set(resumed_from_step)

    def step_done(self, seconds: float) -> None:
        STEPS.inc()
        STEPS_PER_SECOND.set(1.0 / seconds if seconds > 0 else 0.0)
        LAST_STEP_AT.set(time.time())

    def checkpoint_written(self, seconds: float, size: int) -> None:
        CHECKPOINTS.inc()
        CHECKPOINT_SECONDS.observe(seconds)
        CHECKPOINT_BYTES.set(size)

    def generation_ended(self, outcome: str) -> None:
        GENERATION_ACTIVE.set(0)
        GENERATIONS.labels(outcome=outcome).inc()
