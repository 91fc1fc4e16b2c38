"""The pools of video workers: one model version on one GPU class, and how they are keyed."""

from __future__ import annotations

from dataclasses import dataclass

from leasehold.gpu_classes import GpuClass
from workflows.video.models import VideoModelSpec


def pool_key(model: str, gpu_class: str | None) -> str:
    """The key of a model's pool on ``gpu_class`` (the suffix of its queue after ``video.``)."""
    return model if gpu_class is None else f"{model}.{gpu_class}"


@dataclass(frozen=True)
class Pool:
    """The workers of one model version on one GPU class (``gpu_class`` None: no classes)."""

    spec: VideoModelSpec
    gpu_class: GpuClass | None = None

    @property
    def class_name(self) -> str | None:
        return self.gpu_class.name if self.gpu_class is not None else None

    @property
    def key(self) -> str:
        return pool_key(self.spec.name, self.class_name)

    @property
    def label(self) -> str:
        """How messages name the pool."""
        if self.gpu_class is None:
            return self.spec.name
        return f"{self.spec.name} on {self.gpu_class.name} GPUs ({self.gpu_class.memory_gib:g} GiB)"
