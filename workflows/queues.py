"""Task-queue names, timeouts and retry policies: every such constant lives here.

Queue names take the deployment's ``queue_prefix`` (a setting, empty by default); the API
resolves full names and passes them to workflows in their inputs, because workflows never
read configuration.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

ORCHESTRATION = "orchestration"


def backoff(
    initial: timedelta, maximum: timedelta, attempts: int = 0, non_retryable: list[str] | None = None
) -> RetryPolicy:
    """Retries whose interval doubles from ``initial`` up to ``maximum``; ``attempts`` 0: no limit."""
    return RetryPolicy(
        initial_interval=initial,
        backoff_coefficient=2.0,
        maximum_interval=maximum,
        maximum_attempts=attempts,
        non_retryable_error_types=non_retryable,
    )


def orchestration_queue(prefix: str = "") -> str:
    """Workflows and light housekeeping activities run here."""
    return f"{prefix}{ORCHESTRATION}"


# Capacity types: what a GPU worker's machine costs and whether it can be taken back. Paid jobs
# go to reserved capacity first and spill to preemptible; free jobs the other way round.
RESERVED = "reserved"
PREEMPTIBLE = "preemptible"
CAPACITY_TYPES = (RESERVED, PREEMPTIBLE)


def video_queue(model: str, prefix: str = "", gpu_class: str | None = None, capacity_type: str | None = None) -> str:
    """Each model version has its own queue per GPU class (and capacity type); a GPU worker
    polls exactly one.

    Without classes (``gpu_class`` None: the default deployment) the queue is the model's own.
    A deployment that splits its fleet into reserved and preemptible capacity suffixes the
    queue with ``@<capacity type>`` (``video.<model>.<class>@reserved``): ``@`` is in no class
    or model name, so the suffix never reads as a class, and CI queues use it the same way.
    """
    base = f"{prefix}video.{model}" if gpu_class is None else f"{prefix}video.{model}.{gpu_class}"
    return base if capacity_type is None else f"{base}@{capacity_type}"


def capacity_order(tier: str) -> tuple[str, str]:
    """The capacity types a job of ``tier`` tries, first choice first."""
    return (RESERVED, PREEMPTIBLE) if tier == "paid" else (PREEMPTIBLE, RESERVED)


# The sandbox backend of tenants whose plan names none (``leasehold plans isolation``).
DEFAULT_CI_ISOLATION = "bubblewrap"


def ci_queue(labels: list[str] | tuple[str, ...], prefix: str = "", isolation: str = DEFAULT_CI_ISOLATION) -> str:
    """A CI job's ``runs-on`` labels, order-insensitive, name its queue; a tenant whose plan
    asks for another sandbox backend (gVisor) has its jobs on that backend's queue of the same
    labels (``ci.linux@gvisor``), which only workers running that backend poll. A worker polls
    the queue of every subset of its own labels (``ci_label_subsets``): a job runs on any worker
    that has all of its labels, as on GitHub."""
    base = f"{prefix}ci." + "+".join(sorted(set(labels)))
    return base if isolation == DEFAULT_CI_ISOLATION else f"{base}@{isolation}"


def ci_image_queue(
    labels: list[str] | tuple[str, ...], digest: str, prefix: str = "", isolation: str = DEFAULT_CI_ISOLATION
) -> str:
    """The queue of the workers of ``labels`` that hold the image ``digest`` (``sha256:...``) in
    their cache: a ``container:`` job tries it first (image affinity), then ``ci_queue``. ``#``
    is in no label, isolation or digest, so the suffix never reads as one of them."""
    return f"{ci_queue(labels, prefix, isolation)}#{digest.removeprefix('sha256:')[:32]}"


# Most labels one CI worker may serve: it polls the queue of every non-empty subset of its
# labels (2**n - 1 queues: 63 at 6), so that a job goes to any worker holding all its labels.
MAX_CI_WORKER_LABELS = 6


class TooManyLabels(ValueError):
    """A CI worker's label set is larger than ``MAX_CI_WORKER_LABELS``."""


def ci_label_subsets(labels: list[str] | tuple[str, ...], limit: int = MAX_CI_WORKER_LABELS) -> list[tuple[str, ...]]:
    """The label sets whose jobs a worker of ``labels`` takes: every non-empty subset (sorted,
    deduplicated, largest first: the worker's own set leads). Refuses more than ``limit`` labels."""
    unique = sorted({x.strip() for x in labels if x.strip()})
    if not unique:
        raise ValueError("a CI worker needs at least one label")
    if len(unique) > limit:
        raise TooManyLabels(
            f"a CI worker serves at most {limit} labels (it polls one queue per subset: "
            f"{2**limit - 1}); got {len(unique)}: {', '.join(unique)}"
        )
    subsets = [tuple(x for i, x in enumerate(unique) if mask >> i & 1) for mask in range(1, 2 ** len(unique))]
    return sorted(subsets, key=lambda s: (-len(s), s))


# Video jobs ----------------------------------------------------------------------------

# An accepted job ends within this budget even when no GPU ever picks it up.
VIDEO_GENERATE_SCHEDULE_TO_CLOSE = timedelta(hours=24)

# Infra failures (lost worker, preemption, heartbeat timeout) retry quickly; a bad request or
# a model that cannot handle the input fails the job at once.
VIDEO_GENERATE_RETRY = backoff(
    timedelta(seconds=1), timedelta(seconds=30), 50, ["InvalidRequest", "ModelMismatch", "GenerationFailed"]
)

# A job whose first capacity type has no free worker for this long is handed to the other
# type (schedule-to-start timeout); each further hand-over waits twice as long, up to the cap,
# so a job that no worker takes adds a few events an hour to its history, not hundreds.
VIDEO_CAPACITY_FALLBACK_MAX = timedelta(minutes=10)
# Attempt numbers of a job's n-th hand-over start at n x this (object keys stay unique per
# attempt across hand-overs, each of which is a new activity counting from 1).
VIDEO_CAPACITY_ATTEMPT_STRIDE = 100

# Deleting a job's checkpoints and leftovers (orchestration worker).
VIDEO_HOUSEKEEPING_TIMEOUT = timedelta(minutes=2)
VIDEO_HOUSEKEEPING_RETRY = backoff(timedelta(seconds=1), timedelta(seconds=30), 20)

# Writing a job's snapshot to the read model (orchestration worker): one small SQL write, so a
# short timeout; retried without limit, because the read model must converge on the outcome
# even through a long database outage.
VIDEO_PROJECTION_TIMEOUT = timedelta(seconds=10)
VIDEO_PROJECTION_RETRY = backoff(timedelta(seconds=1), timedelta(seconds=30))

# GPU workers send heartbeats at least this often (Temporal's default is 0.8 x heartbeat
# timeout): cancellation and lease loss arrive in heartbeat responses, and a job must stop
# within seconds of a cancel.
GPU_MAX_HEARTBEAT_THROTTLE = timedelta(seconds=1)

# On SIGTERM the running generation checkpoints and fails as Preempted; this is how long the
# worker waits for that before it cancels the activity outright.
GPU_GRACEFUL_SHUTDOWN = timedelta(seconds=30)


# CI ---------------------------------------------------------------------------------------

CI_CONTROL = "ci-control"


def ci_control_queue(prefix: str = "") -> str:
    """Git work of CI (mirror fetch, listing workflow files): served by every CI worker."""
    return f"{prefix}{CI_CONTROL}"


CI_PROBE = "ci-probe"


def ci_probe_queue(prefix: str = "") -> str:
    """Which job queues have live pollers (asked by tenant semaphores): served by every CI
    worker, apart from the control queue so that a slow git fetch never delays a grant."""
    return f"{prefix}{CI_PROBE}"


# An image queue's probe answer (has it pollers?) is used this long by a run: a matrix of
# container jobs asks once, and a worker that starts holding the image is found soon after.
CI_IMAGE_PROBE_FRESH = timedelta(seconds=30)

# A probe of job queues: one DescribeTaskQueue each, all at once; a probe no CI worker answers
# in this long grants as if served (no CI worker of this build is up, e.g. during a rollout).
CI_PROBE_TIMEOUT = timedelta(seconds=5)
CI_PROBE_RETRY = RetryPolicy(maximum_attempts=1)


# Listing workflow files at a commit: fetch the mirror (may be a first clone) and read blobs.
CI_LIST_WORKFLOWS_TIMEOUT_SECONDS = 600.0
CI_LIST_WORKFLOWS_HEARTBEAT_SECONDS = 30.0
CI_LIST_WORKFLOWS_MAX_ATTEMPTS = 5
# A job's activity may run this long past its timeout-minutes (checkout, log flush, kill grace).
CI_JOB_TIMEOUT_MARGIN_SECONDS = 300.0
# Temporal attempts per job per retry round: worker crashes and lost leases, not job failures
# (a failing job is a result, never retried automatically).
CI_JOB_MAX_ATTEMPTS = 3
# How long a job may wait for a worker with its runs-on labels before it fails.
CI_JOB_SCHEDULE_TO_START_SECONDS = 24 * 3600.0
# Manual retries accepted per run: bounds the run workflow's history (see CIRunWorkflow).
CI_MAX_RETRIES_PER_RUN = 20

# CI reconciler (lost webhooks): its activities run on the control queue (CI workers hold the
# mirrors and the database); repositories are reconciled a few at a time.
CI_RECONCILE_REPO_TIMEOUT_SECONDS = 600.0
CI_RECONCILE_HEARTBEAT_SECONDS = 30.0
CI_RECONCILE_MAX_ATTEMPTS = 3
CI_RECONCILE_PARALLEL_REPOS = 4
# Repositories per workflow run; the rest continue as new (bounds the history).
CI_RECONCILE_REPOS_PER_RUN = 200

# CI read model (the push and run workflows' snapshots, written on the orchestration queue):
# a write is a small SQL transaction; a database that is down is waited out with backoff,
# but a run's close is held up at most this long by its last write.
CI_PROJECTION_TIMEOUT = timedelta(seconds=30)
CI_PROJECTION_SCHEDULE_TO_CLOSE = timedelta(minutes=10)
CI_PROJECTION_RETRY = backoff(timedelta(milliseconds=200), timedelta(seconds=30))


# Lifecycle schedules (expiry, orphan sweeps, CI log compaction and retention) ---------------

# One batch of a lifecycle job: bounded rows, each one idempotent; a batch that dies is simply
# done again (by a retry, or by the next tick of the schedule).
LIFECYCLE_BATCH_TIMEOUT = timedelta(minutes=10)
LIFECYCLE_BATCH_HEARTBEAT = timedelta(seconds=60)
LIFECYCLE_BATCH_RETRY = backoff(timedelta(seconds=2), timedelta(seconds=60), 5)

# Completion webhooks (activities.video.webhooks): one attempt delivers to every endpoint of the
# job's owner (each waits at most video_webhook_timeout_seconds); endpoints that failed are
# tried again with back-off, about 40 minutes in all, then their delivery is marked failed.
VIDEO_WEBHOOK_TIMEOUT = timedelta(minutes=5)
VIDEO_WEBHOOK_RETRY = backoff(timedelta(seconds=2), timedelta(minutes=10), 12)


# Fleet controller ---------------------------------------------------------------------------

FLEET = "fleet"


def fleet_queue(prefix: str = "") -> str:
    """The fleet controller's workflow and activities: served by the ``leasehold fleet run``
    process, which holds the provider (it starts the local worker processes itself)."""
    return f"{prefix}{FLEET}"


FLEET_OBSERVE_TIMEOUT = timedelta(seconds=30)
FLEET_OBSERVE_RETRY = backoff(timedelta(seconds=1), timedelta(seconds=10), 3)
# Starting workers is quick; retiring one waits for its drain (checkpoint, hand back, exit).
FLEET_APPLY_TIMEOUT = GPU_GRACEFUL_SHUTDOWN * 4
FLEET_APPLY_HEARTBEAT = timedelta(seconds=10)
FLEET_APPLY_RETRY = backoff(timedelta(seconds=1), timedelta(seconds=10), 3)
# Decisions a fleet workflow keeps (its state and the console show them), newest last.
FLEET_DECISIONS_KEPT = 50
