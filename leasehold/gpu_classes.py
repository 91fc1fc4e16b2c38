"""GPU classes: the operator's names for worker memory sizes, and which class a job needs.

Light on purpose (stdlib only): the API picks a job's class at submit, the GPU worker picks the
class it serves at start-up, and both must agree on the rule.

* A class is a name and the GPU memory a worker of it has (``small=24``, ``large=80``, GiB),
  configured in ``Settings.video_gpu_classes``. None configured (the default) is one implicit,
  unbounded class whose queue is ``video.<model>``, exactly as before classes existed.
* A job needs ``frames x width x height x memory_bytes_per_frame_pixel`` bytes (its model's
  catalogue figure) and goes to the smallest class that holds that.
* A worker serves the largest class its memory covers (a 40 GiB card is a ``small`` worker).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

GIB = 1 << 30
# Class names end up in task-queue names (``video.<model>.<class>``) and metric labels.
CLASS_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


@dataclass(frozen=True, order=True)
class GpuClass:
    """One class of GPU worker: its memory (bytes) and its name; orders smallest first."""

    memory_bytes: int
    name: str

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


def parse_classes(value: Mapping[str, float]) -> tuple[GpuClass, ...]:
    """``{"small": 24, "large": 80}`` -> the classes, smallest first; raises ``ValueError``."""
    classes = []
    for name, gib in value.items():
        if not CLASS_NAME.match(name):
            raise ValueError(f"GPU class name {name!r} must be lower-case letters, digits, '-' or '_' (at most 32)")
        if not math.isfinite(gib) or gib <= 0:
            raise ValueError(f"GPU class {name!r} needs a positive memory size in GiB, got {gib!r}")
        classes.append(GpuClass(memory_bytes=int(gib * GIB), name=name))
    return tuple(sorted(classes))


def job_memory_bytes(frames: int, width: int, height: int, bytes_per_frame_pixel: float) -> int:
    """The GPU memory a job of ``frames`` frames of ``width x height`` is estimated to need."""
    return math.ceil(frames * width * height * bytes_per_frame_pixel)


def classes_fitting(classes: Iterable[GpuClass], need_bytes: int) -> list[GpuClass]:
    """The classes whose workers hold a job of ``need_bytes``, smallest first."""
    return sorted(c for c in classes if c.memory_bytes >= need_bytes)


def class_of_worker(classes: Iterable[GpuClass], memory_bytes: int) -> GpuClass | None:
    """The largest class a worker with ``memory_bytes`` covers; ``None`` when it is below all."""
    covered = [c for c in classes if c.memory_bytes <= memory_bytes]
    return max(covered) if covered else None
