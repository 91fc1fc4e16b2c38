"""Task-queue names, timeouts and retry policies: every such constant lives here.

Queue names take the deployment's ``queue_prefix`` (a setting, empty by default); the API
resolves full names and passes them to workflows in their inputs, because workflows never
read configuration.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

ORCHESTRATION = "orchestration"


def orchestration_queue(prefix: str = "") -> str:
    """Workflows and light housekeeping activities run here."""
    return f"{prefix}{ORCHESTRATION}"


def video_queue(model: str, prefix: str = "") -> str:
    """Each model version has its own queue; a GPU worker polls exactly one."""
    return f"{prefix}video.{model}"


def ci_queue(labels: list[str] | tuple[str, ...], prefix: str = "") -> str:
    """A CI job's ``runs-on`` labels, order-insensitive, name its queue."""
    return f"{prefix}ci." + "+".join(sorted(set(labels)))


# Video jobs ----------------------------------------------------------------------------

# An accepted job ends within this budget even when no GPU ever picks it up.
VIDEO_GENERATE_SCHEDULE_TO_CLOSE = timedelta(hours=24)

# Infra failures (lost worker, preemption, heartbeat timeout) retry quickly; a bad request or
# a model that cannot handle the input fails the job at once.
VIDEO_GENERATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=50,
    non_retryable_error_types=["InvalidRequest", "ModelMismatch", "GenerationFailed"],
)

# Deleting a job's checkpoints and leftovers (orchestration worker).
VIDEO_HOUSEKEEPING_TIMEOUT = timedelta(minutes=2)
VIDEO_HOUSEKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=20,
)

# GPU workers send heartbeats at least this often (Temporal's default is 0.8 x heartbeat
# timeout): cancellation and lease loss arrive in heartbeat responses, and a job must stop
# within seconds of a cancel.
GPU_MAX_HEARTBEAT_THROTTLE = timedelta(seconds=1)

# On SIGTERM the running generation checkpoints and fails as Preempted; this is how long the
# worker waits for that before it cancels the activity outright.
GPU_GRACEFUL_SHUTDOWN = timedelta(seconds=30)
