"""Model implementations a GPU worker can load, by catalogue family."""

from __future__ import annotations

from collections.abc import Callable

from activities.video.generation import VideoModel
from workflows.video.models import VideoModelSpec


def _procedural(spec: VideoModelSpec, device: str, threads: int, pace: float) -> VideoModel:
    from worker_gpu.models.procedural import ProceduralVideoModel

    model = ProceduralVideoModel(device=device, threads=threads, pace_seconds_per_frame_megapixel=pace)
    model.load()
    return model


def _wan(spec: VideoModelSpec, device: str, threads: int, pace: float) -> VideoModel:
    from worker_gpu.models.diffusers_video import WanVideoModel

    model = WanVideoModel(spec, device=device, threads=threads, pace_seconds_per_frame_megapixel=pace)
    model.load()
    return model


def _wan_i2v(spec: VideoModelSpec, device: str, threads: int, pace: float) -> VideoModel:
    from worker_gpu.models.wan_i2v import WanImageToVideoModel

    model = WanImageToVideoModel(spec, device=device, threads=threads, pace_seconds_per_frame_megapixel=pace)
    model.load()
    return model


# family -> factory(catalogue entry, device, torch threads, step pace) returning a loaded model.
LOADERS: dict[str, Callable[[VideoModelSpec, str, int, float], VideoModel]] = {
    "procedural": _procedural,
    "wan": _wan,
    "wan-i2v": _wan_i2v,
}


def load_model(spec: VideoModelSpec, device: str, threads: int, pace: float = 0.0) -> VideoModel:
    """Load the model a catalogue entry describes; raises ``KeyError`` when this build has no
    implementation of its family, ``FileNotFoundError`` when its weights are not there.

    ``pace``: seconds per frame-megapixel each sampler step takes at least (0: as fast as it
    computes); see ``Settings.video_step_pace_seconds_per_frame_megapixel``.
    """
    return LOADERS[spec.family](spec, device, threads, pace)
