"""What a GPU worker reports about its device: the kind, the memory jobs can use, its class.

Measured after the model is loaded, so the weights' share is already taken: a CUDA worker
reports ``torch.cuda.mem_get_info``'s free bytes; a CPU worker (tests, demos) reports what the
operator declared (``--memory-gib`` / ``LEASEHOLD_GPU_MEMORY_GIB``), which also overrides the
measurement on CUDA (to keep headroom for other processes on a shared card).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import Gauge

from leasehold.gpu_classes import GIB, GpuClass, class_of_worker
from leasehold.settings import Settings

log = logging.getLogger(__name__)

GPU_MEMORY = Gauge(
    "leasehold_gpu_memory_bytes", "GPU memory this worker offers jobs, and the class it serves", ["device", "gpu_class"]
)


class NoGpuClass(SystemExit):
    """The worker's memory fits no configured class, or is unknown (exits with a one-line reason)."""


@dataclass(frozen=True)
class DeviceReport:
    """The worker's device kind, the memory it offers (``None``: unknown) and the class it serves."""

    device: str
    memory_bytes: int | None
    gpu_class: GpuClass | None


def device_memory(device: str, declared_gib: float | None) -> int | None:
    """Bytes a job may use on ``device``: the declared figure, else CUDA's free memory."""
    if declared_gib is not None:
        return int(declared_gib * GIB)
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return None


def report_device(settings: Settings, device: str) -> DeviceReport:
    """The worker's report; exits with a reason when classes are configured and none fits it."""
    memory = device_memory(device, settings.gpu_memory_gib)
    classes = settings.gpu_classes
    gpu_class: GpuClass | None = None
    if classes:
        names = ", ".join(f"{c.name}={c.memory_gib:g}" for c in classes)
        if memory is None:
            raise NoGpuClass(
                f"leasehold: error: GPU classes are configured ({names} GiB) but this worker's memory on {device} "
                "is unknown; declare it with --memory-gib N"
            )
        gpu_class = class_of_worker(classes, memory)
        if gpu_class is None:
            raise NoGpuClass(
                f"leasehold: error: this worker has {memory / GIB:.2f} GiB on {device}, below every GPU class "
                f"({names} GiB)"
            )
    label = gpu_class.name if gpu_class is not None else ""
    GPU_MEMORY.labels(device=device, gpu_class=label).set(memory or 0)
    log.info(
        "device %s offers %s; serving GPU class %s",
        device,
        f"{memory / GIB:.2f} GiB" if memory is not None else "an undeclared amount of memory",
        label or "(none: deployment without classes)",
    )
    return DeviceReport(device=device, memory_bytes=memory, gpu_class=gpu_class)
