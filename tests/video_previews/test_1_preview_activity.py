"""Previews in the generation activity (ActivityEnvironment, the real stand-in model, a local
store): stored attempt-scoped every N steps, named in the heartbeat, superseded ones pruned, and the video's
bytes unchanged by them."""

from __future__ import annotations

import dataclasses
import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from temporalio.testing import ActivityEnvironment

from activities.video import generation
from activities.video.generation import EncodedPreview, GenerationJob, VideoGenerationActivities
from leasehold.storage import LocalObjectStore
from tests.video_core.jobs import request
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.procedural import ProceduralVideoModel
from worker_gpu.previews import WebPStripEncoder
from workflows.video.types import GenerateInput, GenerateProgress

PREFIX = "videos/video_preview_unit"
REQUEST = request(seconds=1, width=180, height=320, steps=9)


@pytest.fixture(scope="module")
def model() -> ProceduralVideoModel:
    loaded = ProceduralVideoModel(device="cpu", threads=1)
    loaded.load()
    return loaded


def run(
    model: Any, root: Path, every: int, encoder: Any = None, max_side: int = 64
) -> tuple[LocalObjectStore, str, list[GenerateProgress]]:
    store = LocalObjectStore(root, b"unit-test-key", "http://127.0.0.1:1")
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_timeout=timedelta(seconds=30))
    beats: list[GenerateProgress] = []
    # The activity reuses one progress object: keep each heartbeat as it was sent.
    env.on_heartbeat = lambda *details: beats.append(details[0].model_copy())
    activities = VideoGenerationActivities(
        model,
        H264Encoder(),
        store,
        preview_every_steps=every,
        preview_max_side=max_side,
        preview_encoder=encoder if encoder is not None else WebPStripEncoder(),
    )
    input = GenerateInput(
        job_id="video_preview_unit", request=REQUEST, object_prefix=PREFIX, checkpoint_interval_seconds=1000
    )
    result = env.run(activities.generate_video, input)
    return store, result.video_key, beats


def test_previews_every_n_steps_change_no_byte(model: ProceduralVideoModel, tmp_path: Path) -> None:
    plain_store, plain_key, plain_beats = run(model, tmp_path / "plain", every=0)
    assert all(beat.preview_key is None for beat in plain_beats)
    assert not [k for k in plain_store.list(PREFIX + "/") if "/previews/" in k]

    store, key, beats = run(model, tmp_path / "previews", every=2)
    # Previews at steps 2, 4, 6 and 8 (none at the last step: the video itself is next).
    named = [(beat.preview_step, beat.preview_key) for beat in beats if beat.preview_key is not None]
    assert sorted({step for step, _ in named}) == [2, 4, 6, 8]
    for step, preview_key in named:
        assert preview_key == f"{PREFIX}/attempt-2/previews/step-{step:06d}.webp"
    # Superseded ones stay a while (readers learn keys late); the job's cleanup removes them.
    kept = sorted(k for k in store.list(PREFIX + "/") if "/previews/" in k)
    assert kept == [f"{PREFIX}/attempt-2/previews/step-{s:06d}.webp" for s in (2, 4, 6, 8)]
    data = store.get(kept[-1])
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    with av.open(io.BytesIO(data)) as container:
        frame = next(container.decode(video=0))
        # Four frames of 36x64 side by side, 2 px apart.
        assert (frame.width, frame.height) == (4 * 36 + 3 * 2, 64)
    assert store.get(key) == plain_store.get(plain_key)


def test_superseded_previews_are_pruned(
    model: ProceduralVideoModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generation, "PREVIEWS_KEPT_MAX", 2)
    store, _, _ = run(model, tmp_path / "max", every=2)
    kept = sorted(k.rsplit("/", 1)[1] for k in store.list(PREFIX + "/") if "/previews/" in k)
    assert kept == ["step-000006.webp", "step-000008.webp"]


def test_a_failing_preview_does_not_fail_the_job(model: ProceduralVideoModel, tmp_path: Path) -> None:
    class Broken:
        def encode_preview(self, frames: np.ndarray) -> EncodedPreview:
            raise RuntimeError("encoder exploded")

    store, key, beats = run(model, tmp_path, every=3, encoder=Broken())
    assert store.get(key)
    assert all(beat.preview_key is None for beat in beats)


def test_procedural_preview_shape_and_purity(model: ProceduralVideoModel) -> None:
    job = GenerationJob(
        model=model.name, prompt="a blue ocean", seed=3, width=320, height=180, frames=8, fps=24, steps=3
    )
    state = model.init_state(job)
    model.step(state)
    before = (state.step, state.latent.clone(), state.rng.get_state().clone())
    frames = model.preview(state, 100)
    assert frames.dtype == np.uint8 and frames.shape == (4, 56, 100, 3)
    assert max(model.preview(state, 40).shape[1:3]) <= 40
    # Nothing a step depends on moved.
    assert state.step == before[0]
    assert (state.latent == before[1]).all()
    assert (state.rng.get_state() == before[2]).all()
    # The estimate becomes the video: the preview at the end matches the decoded frames, scaled.
    while state.step < job.steps:
        model.step(state)
    final = model.preview(state, 320)
    decoded = model.decode(state)
    assert np.abs(final[0].astype(int) - decoded[0].astype(int)).mean() < 8
