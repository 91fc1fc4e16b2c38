"""Tiny random-weight Wan pipelines saved in the diffusers layout, served through a catalogue
file exactly as a deployment serves real weights (no weights or network needed)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testing.harness import ManagedProcess
from testing.process_stack import ORCHESTRATION, ProcessStack, gpu_worker
from workflows.video.catalogue import load_catalogue
from workflows.video.models import DEFAULT_CATALOGUE, VideoModelSpec, use_catalogue

MODEL = "wan-tiny"
# The image-to-video twin (WanImageToVideoPipeline components, tiny random weights).
I2V_MODEL = "wan-i2v-tiny"
# The remixing twin: the text-to-video weights (the components of diffusers' own video-to-video
# tests are those of its text-to-video ones), family wan-v2v.
V2V_MODEL = "wan-v2v-tiny"
PROCEDURAL = "procedural-v1"


@dataclass
class Catalogue:
    path: Path
    weights: Path
    models: dict[str, VideoModelSpec]


@pytest.fixture(scope="package")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalogue]:
    """A catalogue file with the tiny Wan pipeline (weights given relative to the file) and the
    stand-in; installed in this process too, as the API and the worker install it."""
    from worker_gpu.models.tiny_wan import build_tiny_wan, build_tiny_wan_i2v, tiny_catalogue_entry

    root = tmp_path_factory.mktemp("models")
    weights = build_tiny_wan(root / "weights" / "wan-tiny")
    build_tiny_wan_i2v(root / "weights" / "wan-i2v-tiny")
    path = root / "catalogue.toml"
    path.write_text(
        tiny_catalogue_entry(MODEL, Path("weights/wan-tiny"), max_steps=1000, created=1767225600)
        + "\n"
        + tiny_catalogue_entry(
            I2V_MODEL, Path("weights/wan-i2v-tiny"), family="wan-i2v", max_steps=1000, created=1767225600
        )
        + "\n"
        + tiny_catalogue_entry(
            V2V_MODEL, Path("weights/wan-tiny"), family="wan-v2v", max_steps=1000, created=1767225600
        )
        + "\n[models.procedural-v1]\nfamily = 'procedural'\nsizes = ['180x320']\ndefault_size = '180x320'\n"
        "min_seconds = 1\nmax_seconds = 2\ndefault_seconds = 1\nfps = 8\ndefault_steps = 4\n"
    )
    models = load_catalogue(path)
    use_catalogue(models)
    try:
        yield Catalogue(path=path, weights=weights, models=models)
    finally:
        use_catalogue(DEFAULT_CATALOGUE)


@dataclass
class ModelStack(ProcessStack):
    def gpu(self, name: str, model: str = MODEL) -> ManagedProcess:
        """A GPU worker for a tiny model, started (not yet waited for)."""
        return self.start_worker(gpu_worker(model, name=name))


@pytest.fixture(scope="package")
def model_stack(
    temporal_address: str, catalogue: Catalogue, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModelStack]:
    """The API and an orchestration worker as real processes, serving the catalogue file."""
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    with ModelStack.running(
        temporal_address,
        tmp_path_factory.mktemp("model-stack"),
        ORCHESTRATION,
        model_catalogue=catalogue.path,
        models=[MODEL, I2V_MODEL, V2V_MODEL, PROCEDURAL],
        # A step of the tiny model at 64x64 (9 frames) takes at least 26 ms: on an idle host the
        # whole 400-step job otherwise ended before a checkpoint could be seen and a worker
        # killed. The floor changes no bytes (the reference video is computed unpaced).
        video_step_pace_seconds_per_frame_megapixel=0.7,
    ) as stack:
        yield stack
