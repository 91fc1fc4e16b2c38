"""Model versions a GPU worker can load, by catalogue name."""

from __future__ import annotations

from collections.abc import Callable

from activities.video.generation import VideoModel


def _procedural(device: str, threads: int, pace: float) -> VideoModel:
    from worker_gpu.models.procedural import ProceduralVideoModel

    model = ProceduralVideoModel(device=device, threads=threads, pace_seconds_per_frame_megapixel=pace)
    model.load()
    return model


# name -> factory(device, torch threads, step pace) returning a loaded model.
LOADERS: dict[str, Callable[[str, int, float], VideoModel]] = {
    "procedural-v1": _procedural,
}


def load_model(name: str, device: str, threads: int, pace: float = 0.0) -> VideoModel:
    """Load model version ``name``; raises ``KeyError`` when this build cannot serve it.

    ``pace``: seconds per frame-megapixel each sampler step takes at least (0: as fast as it
    computes); see ``Settings.video_step_pace_seconds_per_frame_megapixel``.
    """
    return LOADERS[name](device, threads, pace)
