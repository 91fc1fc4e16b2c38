"""``leasehold worker gpu --model M``: loads one model version, polls its queue, one job at a time.

SIGTERM is the preemption notice: the running generation checkpoints at once and fails its
attempt as ``Preempted`` so Temporal re-dispatches it without waiting for a heartbeat
timeout; then the worker exits. The fleet controller retires a worker the same way (drain
before retire: it stops polling, checkpoints, hands its job back, exits).

With reserved and preemptible capacity (``video_capacity_types``) a worker declares its type
(``--capacity-type``) and polls ``video.<model>[.<class>]@<type>``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from activities.video.generation import VideoGenerationActivities
from leasehold.settings import Settings
from leasehold.storage import open_store
from leasehold.worker_process import run_worker
from leasehold.worker_versioning import deployment_config
from worker_gpu.gpu_memory import DeviceReport, report_device
from worker_gpu.job_signals import StartedAnnouncer
from worker_gpu.metrics import MODEL_INFO, PrometheusObserver
from worker_gpu.models import LOADERS, load_model
from workflows.queues import GPU_GRACEFUL_SHUTDOWN, GPU_MAX_HEARTBEAT_THROTTLE, video_queue
from workflows.version import BUILD_ID
from workflows.video.catalogue import CatalogueError, load_catalogue
from workflows.video.models import VideoModelSpec, get_model, use_catalogue

log = logging.getLogger(__name__)

# The `gpu` extra: the model runs on torch (real ones through diffusers and transformers), the
# encoder on PyAV and numpy. Other processes install leasehold without it.
GPU_EXTRA = ("torch", "numpy", "av", "diffusers", "transformers", "safetensors")


class UnknownModel(SystemExit):
    """The worker was asked for a model version it cannot load (exits with a one-line reason)."""


class MissingGpuExtra(SystemExit):
    """leasehold was installed without the ``gpu`` extra (exits with a one-line reason)."""


def require_gpu_extra() -> None:
    """Exit with what to install, rather than a traceback, when the gpu extra is missing."""
    missing = [name for name in GPU_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingGpuExtra(
            f"leasehold: error: the GPU worker needs {', '.join(missing)}: pip install 'leasehold[gpu]'"
        )


def load_model_entry(settings: Settings) -> VideoModelSpec:
    """The catalogue entry of the model this worker serves (the catalogue is installed for the
    process, so the generation activity validates jobs against the same entries)."""
    try:
        models = load_catalogue(settings.model_catalogue)
    except CatalogueError as exc:
        raise UnknownModel(f"leasehold: error: {exc}") from None
    use_catalogue(models)
    spec = get_model(settings.gpu_model)
    if spec is None or spec.family not in LOADERS:
        raise UnknownModel(
            f"leasehold: error: unknown model {settings.gpu_model!r}; the catalogue has: {', '.join(models)}"
        )
    return spec


def build_activities(settings: Settings) -> tuple[VideoGenerationActivities, DeviceReport]:
    """Load the model (before polling, so the first job does not pay for it) and wire the activity."""
    require_gpu_extra()
    # Imported once the extra is known to be there: PyAV and numpy load with it.
    from worker_gpu.encoding import H264Encoder
    from worker_gpu.previews import WebPStripEncoder

    name = settings.gpu_model
    spec = load_model_entry(settings)
    try:
        model = load_model(
            spec, settings.device, settings.video_torch_threads, settings.video_step_pace_seconds_per_frame_megapixel
        )
    except (FileNotFoundError, OSError) as exc:
        raise UnknownModel(f"leasehold: error: cannot load model {name!r}: {exc}") from None
    device = str(getattr(model, "device", settings.device))
    MODEL_INFO.labels(model=name, device=device).set(1)
    log.info("loaded model %s on %s", name, device)
    # After loading: the memory left is what jobs get.
    report = report_device(settings, device)
    activities = VideoGenerationActivities(
        model,
        H264Encoder(),
        open_store(settings),
        PrometheusObserver(),
        announce_started=StartedAnnouncer(),
        checkpoints=settings.video_checkpoints,
        preview_every_steps=settings.video_preview_every_steps,
        preview_max_side=settings.video_preview_max_side,
        preview_encoder=WebPStripEncoder(),
    )
    return activities, report


def build_worker(
    client: Client, settings: Settings, activities: VideoGenerationActivities, gpu_class: str | None = None
) -> Worker:
    if isinstance(activities.announce_started, StartedAnnouncer):
        # Called inside the worker's event loop: the activity thread signals through it.
        activities.announce_started.bind(client, asyncio.get_running_loop())
    return Worker(
        client,
        task_queue=video_queue(settings.gpu_model, settings.queue_prefix, gpu_class, capacity_type(settings)),
        activities=[activities.generate_video],
        activity_executor=ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate"),
        # One video per GPU.
        max_concurrent_activities=1,
        max_heartbeat_throttle_interval=GPU_MAX_HEARTBEAT_THROTTLE,
        graceful_shutdown_timeout=GPU_GRACEFUL_SHUTDOWN,
        # Activities only: the version is reported, routing stays unversioned, so a job pinned
        # to an older build still gets any GPU of its model (docs/versioning.md).
        deployment_config=deployment_config(settings, BUILD_ID, routed=False),
    )


class MissingCapacityType(SystemExit):
    """A deployment with reserved and preemptible capacity started a worker that declares neither."""


def capacity_type(settings: Settings) -> str | None:
    """The capacity type whose queue this worker polls (``None``: a deployment without types).

    A worker declaring a type where the deployment has none (or none where it has them) would
    poll a queue no job is ever sent to, so that is refused at start-up instead.
    """
    declared = settings.gpu_capacity_type
    if settings.video_capacity_types and declared is None:
        raise MissingCapacityType(
            "leasehold: error: this deployment splits reserved and preemptible capacity: "
            "start the worker with --capacity-type reserved|preemptible"
        )
    if not settings.video_capacity_types and declared is not None:
        raise MissingCapacityType(
            f"leasehold: error: --capacity-type {declared} needs LEASEHOLD_VIDEO_CAPACITY_TYPES=true on the deployment"
        )
    return declared


def worker_name(gpu_class: str | None, capacity: str | None) -> str:
    """The process's name in its Temporal identity (pollers, activity history): the class and
    the capacity type it serves, which the capacity tracker and the fleet controller read."""
    return "-".join(["gpu", *(part for part in (gpu_class, capacity) if part)])


def main(settings: Settings) -> None:
    capacity = capacity_type(settings)
    activities, report = build_activities(settings)
    gpu_class = report.gpu_class.name if report.gpu_class is not None else None
    asyncio.run(
        run_worker(
            settings,
            worker_name(gpu_class, capacity),
            lambda client: build_worker(client, settings, activities, gpu_class),
            on_sigterm=activities.notify_preemption,
        )
    )
