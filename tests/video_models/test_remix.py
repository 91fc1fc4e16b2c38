"""Remix with the tiny Wan 2.1 video-to-video model (``wan-v2v``): the loop is
``WanVideoToVideoPipeline.__call__`` byte for byte and resumes byte-identically; through the
real API and GPU worker processes the official ``openai`` client remixes a finished video
(``videos.remix``) whose worker is killed (-9) mid-generation; remixes of another user's video,
an unfinished one and one of a model that cannot remix are refused, with nothing stored; the
official ``replicate`` client remixes a finished prediction through the ``video`` input."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import replicate
import torch
from replicate.exceptions import ReplicateError
from replicate.helpers import FileOutput
from temporalio.client import Client

from activities.video.generation import GenerationJob
from tests.video_core.jobs import probe_mp4, store_of
from tests.video_models.conftest import PROCEDURAL, V2V_MODEL, Catalogue, ModelStack
from tests.video_models.runs import key_for, kill9_after_first_checkpoint, reference_video
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.wan_v2v import WanVideoToVideoModel, decode_source, schedule_length
from workflows.video.ids import workflow_id
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import VideoStatus

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")]


@pytest.fixture(scope="module")
def model(catalogue: Catalogue) -> WanVideoToVideoModel:
    loaded = WanVideoToVideoModel(catalogue.models[V2V_MODEL], device="cpu", threads=1)
    loaded.load()
    return loaded


def _generate(model: WanVideoToVideoModel, job: GenerationJob) -> np.ndarray:
    state = model.init_state(job)
    while state.step < job.steps:
        model.step(state)
    return model.decode(state)


def _mp4(frames: np.ndarray, fps: int) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        return H264Encoder().encode(frames, fps, Path(tmp), lambda: None).video_path.read_bytes()


def test_schedule_length_leaves_exactly_the_jobs_steps() -> None:
    for strength in (0.8, 0.5, 0.3, 1.0):
        for steps in (1, 4, 7, 50):
            length = schedule_length(steps, strength)
            assert int(length * strength) == steps and int((length - 1) * strength) < steps


def test_the_remix_loop_is_the_pipelines_call_and_resumes_byte_identically(
    model: WanVideoToVideoModel, catalogue: Catalogue
) -> None:
    spec = catalogue.models[V2V_MODEL]
    text = GenerationJob(
        model=V2V_MODEL, prompt="a red kite", seed=3, width=48, height=32, frames=spec.frame_count(1), fps=spec.fps,
        steps=4,
    )  # fmt: skip
    source = _mp4(_generate(model, text), spec.fps)
    job = GenerationJob(
        **{**text.__dict__, "prompt": "a blue cat", "steps": 5, "source_video": source, "source_video_sha256": "-"}
    )
    state = model.init_state(job)
    length = len(state.scheduler.timesteps)
    assert length == schedule_length(5, spec.remix_strength) and state.offset == length - 5 > 0
    embeds = state.prompt_embeds, state.negative_embeds
    while state.step < job.steps:
        model.step(state)
    uninterrupted = model.decode(state)
    assert uninterrupted.shape == (9, 32, 48, 3)

    # Stopped after 2 steps, resumed in a new model object from the checkpoint alone.
    half = model.init_state(job)
    for _ in range(2):
        model.step(half)
    data = model.save_state(half)
    other = WanVideoToVideoModel(spec, device="cpu", threads=1)
    other.load()
    resumed = other.load_state(GenerationJob(**{**job.__dict__, "source_video": None}), data)
    assert resumed.step == 2 and resumed.offset == state.offset
    while resumed.step < job.steps:
        other.step(resumed)
    assert np.array_equal(other.decode(resumed), uninterrupted)

    # WanVideoToVideoPipeline.__call__ over the same components, given the same prompt
    # embeddings (its encode_prompt needs ftfy, no dependency here: as for image-to-video).
    pipe = model._video_pipe(type(model.pipe.scheduler).from_config(model.pipe.scheduler.config))
    frames = pipe(
        video=decode_source(source, job.frames), prompt_embeds=embeds[0], negative_prompt_embeds=embeds[1],
        height=job.height, width=job.width, num_inference_steps=length, strength=spec.remix_strength,
        guidance_scale=spec.guidance_scale, generator=torch.Generator("cpu").manual_seed(job.seed), output_type="np",
    ).frames[0]  # fmt: skip
    assert np.array_equal(np.clip(np.round(frames * 255.0), 0, 255).astype(np.uint8), uninterrupted)

    # Another source, another video: the source is really read.
    moved_source = _mp4(_generate(model, GenerationJob(**{**text.__dict__, "seed": 4})), spec.fps)
    assert not np.array_equal(
        _generate(model, GenerationJob(**{**job.__dict__, "source_video": moved_source})), uninterrupted
    )
    # Another size and length: the source's frames are resampled and resized to the job's.
    other_shape = GenerationJob(**{**job.__dict__, "width": 32, "frames": spec.frame_count(2), "steps": 2})
    assert _generate(model, other_shape).shape == (17, 32, 32, 3)
    # Without a source the same model makes text-to-video, as the wan family does.
    assert _generate(model, text).shape == (9, 32, 48, 3)


async def test_the_openai_client_remixes_a_finished_video_and_survives_kill9(
    model_stack: ModelStack, catalogue: Catalogue, temporal_client: Client
) -> None:
    first, second = model_stack.gpu("v2v-1", V2V_MODEL), model_stack.gpu("v2v-2", V2V_MODEL)
    for proc in (first, second):
        await asyncio.to_thread(proc.wait_healthy, 120)
    sdk = openai.AsyncOpenAI(base_url=f"{model_stack.base_url}/v1", api_key=key_for(model_stack), max_retries=0)
    source = await sdk.videos.create_and_poll(
        model=V2V_MODEL,  # type: ignore[arg-type]  # the SDK's type lists OpenAI's own models
        prompt="a red kite over the sea",
        size="64x64",  # type: ignore[arg-type]
        seconds="1",  # type: ignore[arg-type]
        poll_interval_ms=200,
    )
    assert source.status == "completed" and source.remixed_from_video_id is None
    source_mp4 = (await sdk.videos.download_content(source.id)).content

    remix = await sdk.videos.remix(
        source.id, prompt="a blue kite at dusk", extra_body={"seed": 21, "steps": 400},
        extra_headers={"Idempotency-Key": "remix-1"},
    )  # fmt: skip
    assert remix.status == "queued" and remix.id != source.id
    assert (remix.remixed_from_video_id, remix.model, remix.size, remix.seconds) == (source.id, V2V_MODEL, "64x64", "1")
    assert remix.prompt == "a blue kite at dusk"
    # The same key and body: the same job (idempotent), still showing its source.
    again = await sdk.videos.remix(
        source.id, prompt="a blue kite at dusk", extra_body={"seed": 21, "steps": 400},
        extra_headers={"Idempotency-Key": "remix-1"},
    )  # fmt: skip
    assert again.id == remix.id
    assert (await sdk.videos.retrieve(remix.id)).remixed_from_video_id == source.id

    handle = temporal_client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id(remix.id))
    recorded = (await handle.query(VideoJobWorkflow.state)).request
    # The source's MP4 is copied under the remix's own job.
    assert recorded.source_video is not None and recorded.source_video.video_id == source.id
    assert recorded.source_video.key.startswith(f"videos/{remix.id}/input/source-")
    assert store_of(model_stack.settings).get(recorded.source_video.key) == source_mp4
    expected = asyncio.create_task(
        asyncio.to_thread(reference_video, catalogue, recorded, {recorded.source_video.key: source_mp4})
    )

    killed_at, _other = await kill9_after_first_checkpoint(handle, [first, second])
    state = await asyncio.wait_for(handle.result(), 240)
    assert state.status == VideoStatus.COMPLETED and state.result is not None, state
    assert state.result.attempt >= 2 and state.result.resumed_from_step >= killed_at > 0

    content = (await sdk.videos.download_content(remix.id)).content
    assert probe_mp4(content) == ("h264", 64, 64, 9)
    assert content == await expected and content != source_mp4
    # The copy went with the job's end; the source video is untouched.
    assert not store_of(model_stack.settings).exists(recorded.source_video.key)
    assert (await sdk.videos.download_content(source.id)).content == source_mp4


def _inputs(stack: ModelStack) -> list[str]:
    return [key for key in store_of(stack.settings).list("videos/") if "/input/" in key]


def test_remixes_that_cannot_run_are_refused_naming_the_field(model_stack: ModelStack) -> None:
    model_stack.gpu("v2v-refusals", V2V_MODEL).wait_healthy(120)
    model_stack.gpu("procedural-refusals", PROCEDURAL).wait_healthy(120)
    owner = openai.OpenAI(base_url=f"{model_stack.base_url}/v1", api_key=key_for(model_stack), max_retries=0)
    stranger = openai.OpenAI(base_url=f"{model_stack.base_url}/v1", api_key=key_for(model_stack), max_retries=0)
    # The SDK's types list OpenAI's own models, sizes and lengths.
    tiny: dict[str, Any] = {"model": V2V_MODEL, "size": "32x32", "seconds": "1"}
    done = owner.videos.create_and_poll(prompt="a kite", poll_interval_ms=200, **tiny)
    assert done.status == "completed"
    procedural = owner.videos.create_and_poll(prompt="a kite", poll_interval_ms=200, model=PROCEDURAL)  # type: ignore[arg-type]
    assert procedural.status == "completed"
    running = owner.videos.create(prompt="a long one", extra_body={"steps": 1000}, **tiny)
    stored_before = _inputs(model_stack)
    try:
        # Another user's video is no video of theirs.
        with pytest.raises(openai.NotFoundError):
            stranger.videos.remix(done.id, prompt="at night")
        for video_id, param, says in (
            (running.id, "video_id", "only a completed video can be remixed"),
            (procedural.id, "model", f"{PROCEDURAL} cannot remix"),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                owner.videos.remix(video_id, prompt="at night")
            assert refused.value.code == "invalid_request" and refused.value.param == param, refused.value.body
            assert says in refused.value.message
        # The body may ask for another size and length than the source's.
        resized = owner.videos.remix(done.id, prompt="wider", extra_body={"size": "48x32", "seconds": "2"})
        assert (resized.size, resized.seconds, resized.remixed_from_video_id) == ("48x32", "2", done.id)
        # Asking for a model that cannot remix, on a video of one that can.
        with pytest.raises(openai.BadRequestError) as refused:
            owner.videos.remix(done.id, prompt="at night", extra_body={"model": PROCEDURAL})
        assert refused.value.param == "model"
        with httpx.Client(base_url=model_stack.base_url, timeout=30) as http:
            refused_json = http.post(
                f"/v1/videos/{done.id}/remix",
                json={"seconds": "1"},
                headers={"Authorization": f"Bearer {owner.api_key}"},
            )
        assert refused_json.status_code == 400 and refused_json.json()["error"]["param"] == "prompt", refused_json.text
        assert [key for key in _inputs(model_stack) if not key.startswith(f"videos/{resized.id}/")] == stored_before
    finally:
        with httpx.Client(base_url=model_stack.base_url, timeout=30) as http:
            http.post(f"/v1/videos/{running.id}/cancel", headers={"Authorization": f"Bearer {owner.api_key}"})
    # A deleted video is gone for remixes too.
    owner.videos.delete(done.id)
    with pytest.raises(openai.NotFoundError):
        owner.videos.remix(done.id, prompt="at night")


def test_the_replicate_client_remixes_a_finished_prediction(model_stack: ModelStack) -> None:
    model_stack.gpu("v2v-replicate", V2V_MODEL).wait_healthy(120)
    model_stack.gpu("procedural-replicate", PROCEDURAL).wait_healthy(120)
    client = replicate.Client(api_token=key_for(model_stack), base_url=model_stack.base_url)
    stranger = replicate.Client(api_token=key_for(model_stack), base_url=model_stack.base_url)
    ref = f"leasehold/{V2V_MODEL}"
    version = client.models.get(ref).latest_version
    assert version is not None and "video" in version.openapi_schema["components"]["schemas"]["Input"]["properties"]

    source = client.predictions.create(version.id, {"prompt": "a red kite", "size": "32x32", "seconds": 1})
    source.wait()
    assert source.status == "succeeded" and isinstance(source.output, str), source.error
    source_mp4 = FileOutput(source.output, client).read()
    # The output URL a chained client passes, the prediction's own URL and its id all name it.
    for named in (source.output, source.urls["get"], source.id):
        remix = client.predictions.create(version.id, {"prompt": "a blue kite", "video": named, "seed": 5})
        remix.wait()
        assert remix.status == "succeeded", remix.error
        assert isinstance(remix.output, str)
        content = FileOutput(remix.output, client).read()
        assert probe_mp4(content)[1:3] == (32, 32) and content != source_mp4
        assert remix.input["size"] == "32x32" and remix.input["prompt"] == "a blue kite"

    refusals: list[tuple[replicate.Client, str, dict[str, Any], str]] = [
        # Another user's prediction is no prediction of theirs (said as for a missing one).
        (stranger, version.id, {"prompt": "x", "video": source.id}, "no prediction"),
        (client, version.id, {"prompt": "x", "video": "video_" + "0" * 32}, "no prediction"),
        (client, version.id, {"prompt": "x", "video": "https://example.com/a.mp4"}, "not fetched"),
        (client, version.id, {"video": source.id}, "input.prompt"),
    ]
    procedural = client.models.get(f"leasehold/{PROCEDURAL}").latest_version
    assert procedural is not None
    refusals.append((client, procedural.id, {"prompt": "x", "video": source.id}, "takes no video"))
    for caller, version_id, given, says in refusals:
        with pytest.raises(ReplicateError) as refused:
            caller.predictions.create(version_id, given)
        assert refused.value.status == 422 and says in str(refused.value.detail), refused.value
