"""The Wan family in this process: resume is byte-identical, equals the pipeline's own loop,
refuses another version's checkpoint, and previews cheaply."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from temporalio.testing import ActivityEnvironment

from activities.video.generation import GenerationJob
from tests.video_models.conftest import MODEL, Catalogue
from worker_gpu.models.diffusers_video import DiffusersState, WanVideoModel


@pytest.fixture(scope="module")
def model(catalogue: Catalogue) -> WanVideoModel:
    loaded = WanVideoModel(catalogue.models[MODEL], device="cpu", threads=1)
    loaded.load()
    return loaded


def job_of(catalogue: Catalogue, steps: int = 8, seed: int = 5) -> GenerationJob:
    spec = catalogue.models[MODEL]
    return GenerationJob(
        model=MODEL, prompt="a blue kite over the sea", seed=seed, width=48, height=32,
        frames=spec.frame_count(1), fps=spec.fps, steps=steps,
    )  # fmt: skip


def run(model: WanVideoModel, state: DiffusersState, until: int) -> None:
    while state.step < until:
        model.step(state)


def test_resume_in_a_new_model_object_gives_the_same_bytes_as_the_pipeline(
    model: WanVideoModel, catalogue: Catalogue
) -> None:
    job = job_of(catalogue)
    state = model.init_state(job)
    run(model, state, job.steps)
    uninterrupted = model.decode(state)
    assert uninterrupted.shape == (9, 32, 48, 3) and uninterrupted.dtype == np.uint8

    # The tiny pipeline samples with UniPC: its multistep history must travel in the checkpoint.
    assert type(model.pipe.scheduler).__name__ == "UniPCMultistepScheduler"
    half = model.init_state(job)
    run(model, half, 3)
    data = model.save_state(half)
    other = WanVideoModel(catalogue.models[MODEL], device="cpu", threads=1)
    other.load()
    resumed = other.load_state(job, data)
    assert resumed.step == 3
    run(other, resumed, job.steps)
    assert np.array_equal(other.decode(resumed), uninterrupted)

    # Without the scheduler's history the result differs: the test can tell.
    broken = other.load_state(job, data)
    broken.scheduler = other._scheduler(job)
    broken.scheduler._step_index = 3
    run(other, broken, job.steps)
    assert not np.array_equal(other.decode(broken), uninterrupted)

    # And it is the pipeline's own __call__, byte for byte.
    spec = catalogue.models[MODEL]
    frames = model.pipe(
        prompt=job.prompt, negative_prompt=spec.negative_prompt, height=job.height, width=job.width,
        num_frames=job.frames, num_inference_steps=job.steps, guidance_scale=spec.guidance_scale,
        generator=torch.Generator("cpu").manual_seed(job.seed), output_type="np",
    ).frames[0]  # fmt: skip
    assert np.array_equal(np.clip(np.round(frames * 255.0), 0, 255).astype(np.uint8), uninterrupted)


def test_checkpoint_is_stamped_and_another_version_or_dtype_is_refused(
    model: WanVideoModel, catalogue: Catalogue
) -> None:
    job = job_of(catalogue, steps=4)
    state = model.init_state(job)
    model.step(state)
    data = model.save_state(state)
    header = data[8 : 8 + int.from_bytes(data[:8], "little")]
    for stamp in (model.revision.encode(), b'"dtype":"float32"', b'"device_kind":"cpu"'):
        assert stamp in header
    assert model.revision.startswith(f"{MODEL}@")

    newer = WanVideoModel(dataclasses.replace(catalogue.models[MODEL], version="wan-tiny-v2"), "cpu", 1)
    newer.load()
    with pytest.raises(ValueError, match="model version"):
        newer.load_state(job, data)
    with pytest.raises(ValueError):
        model.load_state(job, b"not a checkpoint")
    with pytest.raises(ValueError, match="fit"):
        model.load_state(dataclasses.replace(job, steps=0), data)


def test_preview_is_small_uint8_frames(model: WanVideoModel, catalogue: Catalogue) -> None:
    job = job_of(catalogue, steps=4)
    state = model.init_state(job)
    run(model, state, 2)
    before = state.latents.clone()
    preview = model.preview(state, 24)
    assert preview.dtype == np.uint8 and preview.ndim == 4 and preview.shape[-1] == 3
    assert 1 <= preview.shape[0] <= 4 and max(preview.shape[1:3]) <= 24
    assert preview.shape[1:3] == (16, 24)  # the job's 3:2 aspect
    assert torch.equal(state.latents, before)  # looking does not change the sample


def test_the_generation_activity_starts_afresh_on_another_versions_checkpoint(
    model: WanVideoModel, catalogue: Catalogue, tmp_path: Path
) -> None:
    # A checkpoint of the old version stored under the job, as if the weights changed while
    # the job waited: the new version's worker refuses it and starts the job from step 0.
    from activities.video.checkpoints import JobCheckpoints
    from activities.video.generation import VideoGenerationActivities, job_fingerprint
    from leasehold.storage import LocalObjectStore
    from worker_gpu.encoding import H264Encoder
    from workflows.video.types import GenerateInput, VideoRequest

    request = VideoRequest(prompt="a cat", model=MODEL, seconds=1, width=32, height=32, seed=2, steps=4)
    newer = WanVideoModel(dataclasses.replace(catalogue.models[MODEL], version="wan-tiny-v2"), "cpu", 1)
    newer.load()
    job = job_of(catalogue, steps=4, seed=2)
    job = dataclasses.replace(job, prompt="a cat", width=32, height=32)
    old_state = model.init_state(job)
    run(model, old_state, 2)
    store = LocalObjectStore(tmp_path, b"k", "http://127.0.0.1:1")
    # Stamped with the new version's fingerprint, so only load_state can tell.
    JobCheckpoints(store, "videos/v", 1).commit(2, 4, job_fingerprint(newer, job), model.save_state(old_state))
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_timeout=timedelta(seconds=60))
    result = env.run(
        VideoGenerationActivities(newer, H264Encoder(), store).generate_video,
        GenerateInput(job_id="v", request=request, object_prefix="videos/v", checkpoint_interval_seconds=1e9),
    )
    assert result.resumed_from_step == 0 and result.total_steps == 4
    # The same bytes stamped by the new version itself do resume: the refusal was the version.
    own = newer.init_state(job)
    run(newer, own, 2)
    JobCheckpoints(store, "videos/v", 3).commit(2, 4, job_fingerprint(newer, job), newer.save_state(own))
    env.info = dataclasses.replace(env.info, attempt=4)
    again = env.run(
        VideoGenerationActivities(newer, H264Encoder(), store).generate_video,
        GenerateInput(job_id="v", request=request, object_prefix="videos/v", checkpoint_interval_seconds=1e9),
    )
    assert again.resumed_from_step == 2
