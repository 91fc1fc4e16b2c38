"""Tiny random-weight Wan pipelines saved in the diffusers layout, served through a catalogue
file exactly as a deployment serves real weights (no weights or network needed)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from leasehold.database import init_database
from leasehold.devserver import free_port
from leasehold.settings import Settings
from leasehold.testing.harness import ManagedProcess, start_api, start_worker, unique_prefix
from workflows.video.catalogue import load_catalogue
from workflows.video.models import DEFAULT_CATALOGUE, VideoModelSpec, use_catalogue

MODEL = "wan-tiny"
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
    from worker_gpu.models.tiny_wan import build_tiny_wan, tiny_catalogue_entry

    root = tmp_path_factory.mktemp("models")
    weights = build_tiny_wan(root / "weights" / "wan-tiny")
    path = root / "catalogue.toml"
    path.write_text(
        tiny_catalogue_entry(MODEL, Path("weights/wan-tiny"), max_steps=1000, created=1767225600)
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
class ModelStack:
    settings: Settings
    base_url: str
    logs: Path
    processes: list[ManagedProcess] = field(default_factory=list)

    def gpu(self, name: str) -> ManagedProcess:
        """A GPU worker for the tiny model, started (not yet waited for)."""
        proc = start_worker(self.settings, "gpu", self.logs, "--model", MODEL, name=name)
        self.processes.append(proc)
        return proc


@pytest.fixture(scope="package")
def model_stack(temporal_env, catalogue: Catalogue, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelStack]:  # type: ignore[no-untyped-def]
    """The API and an orchestration worker as real processes, serving the catalogue file."""
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="openai")
    root = tmp_path_factory.mktemp("model-stack")
    logs = root / "logs"
    logs.mkdir()
    settings = Settings(
        data_dir=root / "data",
        temporal_address=temporal_env.client.service_client.config.target_host,
        queue_prefix=unique_prefix(),
        api_port=free_port(),
        model_catalogue=catalogue.path,
        models=[MODEL, PROCEDURAL],
        checkpoint_interval_seconds=1.0,
        video_heartbeat_timeout_seconds=5.0,
        # A step of the tiny model at 64x64 (9 frames) takes at least 26 ms: on an idle host the
        # whole 400-step job otherwise ended before a checkpoint could be seen and a worker
        # killed. The floor changes no bytes (the reference video is computed unpaced).
        video_step_pace_seconds_per_frame_megapixel=0.7,
    )
    settings.data_dir.mkdir(parents=True)
    init_database(settings.resolved_database_url)
    api, base_url = start_api(settings, logs)
    stack = ModelStack(settings=settings, base_url=base_url, logs=logs, processes=[api])
    try:
        stack.processes.append(start_worker(settings, "orchestration", logs))
        for proc in stack.processes:
            proc.wait_healthy(60)
        yield stack
    finally:
        for proc in reversed(stack.processes):
            proc.stop()
