"""Model implementations a GPU worker can load, by catalogue family."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from activities.video.generation import VideoModel
from workflows.video.models import VideoModelSpec

# A factory: (catalogue entry, device, torch threads, step pace) -> a loaded model.
Loader = Callable[[VideoModelSpec, str, int, float], VideoModel]


def _procedural(spec: VideoModelSpec, device: str, threads: int, pace: float) -> VideoModel:
    from worker_gpu.models.procedural import ProceduralVideoModel

    model = ProceduralVideoModel(device=device, threads=threads, pace_seconds_per_frame_megapixel=pace)
    model.load()
    return model


def _diffusers(module: str, class_name: str) -> Loader:
    """The loader of a diffusers model class (imported on first use: torch and diffusers are heavy)."""

    def load(spec: VideoModelSpec, device: str, threads: int, pace: float) -> VideoModel:
        model_class = getattr(importlib.import_module(module), class_name)
        model = model_class(spec, device=device, threads=threads, pace_seconds_per_frame_megapixel=pace)
        model.load()
        return model  # type: ignore[no-any-return]

    return load


LOADERS: dict[str, Loader] = {
    "procedural": _procedural,
    "wan": _diffusers("worker_gpu.models.diffusers_video", "WanVideoModel"),
    "wan-i2v": _diffusers("worker_gpu.models.wan_i2v", "WanImageToVideoModel"),
    "wan-v2v": _diffusers("worker_gpu.models.wan_v2v", "WanVideoToVideoModel"),
    "ltx": _diffusers("worker_gpu.models.ltx_video", "LTXVideoModel"),
    "ltx-i2v": _diffusers("worker_gpu.models.ltx_video", "LTXImageToVideoModel"),
}


def load_model(spec: VideoModelSpec, device: str, threads: int, pace: float = 0.0) -> VideoModel:
    """Load the model a catalogue entry describes; raises ``KeyError`` when this build has no
    implementation of its family, ``FileNotFoundError`` when its weights are not there.

    ``pace``: seconds per frame-megapixel each sampler step takes at least (0: as fast as it
    computes); see ``Settings.video_step_pace_seconds_per_frame_megapixel``.
    """
    return LOADERS[spec.family](spec, device, threads, pace)
