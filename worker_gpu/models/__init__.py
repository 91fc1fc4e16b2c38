"""Model versions a GPU worker can load, by catalogue name."""

from __future__ import annotations

from collections.abc import Callable

from activities.video_generation import VideoModel


def _procedural(device: str, threads: int) -> VideoModel:
    from worker_gpu.models.procedural import ProceduralVideoModel

    model = ProceduralVideoModel(device=device, threads=threads)
    model.load()
    return model


# name -> factory(device, torch threads) returning a loaded model.
LOADERS: dict[str, Callable[[str, int], VideoModel]] = {
    "procedural-v1": _procedural,
}


def load_model(name: str, device: str, threads: int) -> VideoModel:
    """Load model version ``name``; raises ``KeyError`` when this build cannot serve it."""
    return LOADERS[name](device, threads)
