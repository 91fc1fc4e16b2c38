"""Image-to-video with the tiny Wan 2.1 image-to-video pipeline: the loop is the pipeline's own
``__call__`` byte for byte and resumes byte-identically; through the real API and GPU worker
processes the official ``openai`` client makes a video from ``input_reference`` whose worker is
killed (-9) mid-generation, the official ``replicate`` client makes one from ``image``, and bad
images are refused naming the field, with nothing stored."""

from __future__ import annotations

import asyncio
import base64
import io
import os
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import replicate
import torch
from PIL import Image
from replicate.exceptions import ReplicateError
from replicate.helpers import FileOutput
from temporalio.client import Client

from activities.video.generation import GenerationJob
from api.errors import ApiError
from api.video.reference import MAX_REFERENCE_BYTES, read_image
from tests.video_core.jobs import probe_mp4, store_of
from tests.video_models.conftest import I2V_MODEL, MODEL, Catalogue, ModelStack
from tests.video_models.runs import key_for, kill9_after_first_checkpoint, reference_video
from worker_gpu.models.wan_i2v import WanImageToVideoModel
from workflows.video.ids import workflow_id
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import VideoStatus

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")]


def picture(width: int, height: int, kind: str = "PNG", seed: int = 1, **options: Any) -> bytes:
    """A noisy RGB image (so the VAE's condition is not flat) encoded as ``kind``."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, kind, **options)
    return out.getvalue()


@pytest.fixture(scope="module")
def model(catalogue: Catalogue) -> WanImageToVideoModel:
    loaded = WanImageToVideoModel(catalogue.models[I2V_MODEL], device="cpu", threads=1)
    loaded.load()
    return loaded


def test_the_loop_is_the_pipelines_call_and_resumes_byte_identically(
    model: WanImageToVideoModel, catalogue: Catalogue
) -> None:
    spec = catalogue.models[I2V_MODEL]
    image = picture(48, 32)
    job = GenerationJob(
        model=I2V_MODEL, prompt="a blue kite over the sea", seed=5, width=48, height=32,
        frames=spec.frame_count(1), fps=spec.fps, steps=8, reference=image, reference_sha256="-",
    )  # fmt: skip
    state = model.init_state(job)
    embeds = state.prompt_embeds, state.negative_embeds
    while state.step < job.steps:
        model.step(state)
    uninterrupted = model.decode(state)
    assert uninterrupted.shape == (9, 32, 48, 3)

    # Stopped after 3 steps, resumed in a new model object from the checkpoint alone.
    half = model.init_state(job)
    for _ in range(3):
        model.step(half)
    data = model.save_state(half)
    other = WanImageToVideoModel(spec, device="cpu", threads=1)
    other.load()
    resumed = other.load_state(GenerationJob(**{**job.__dict__, "reference": None}), data)
    assert resumed.step == 3 and resumed.condition is not None and resumed.image_embeds is not None
    while resumed.step < job.steps:
        other.step(resumed)
    assert np.array_equal(other.decode(resumed), uninterrupted)

    # The pipeline's own __call__, given the same prompt embeddings (its encode_prompt needs
    # ftfy, which is no dependency here: see worker_gpu/models/wan_i2v.py).
    frames = model.pipe(
        image=Image.open(io.BytesIO(image)).convert("RGB"), prompt_embeds=embeds[0], negative_prompt_embeds=embeds[1],
        height=job.height, width=job.width, num_frames=job.frames, num_inference_steps=job.steps,
        guidance_scale=spec.guidance_scale, generator=torch.Generator("cpu").manual_seed(job.seed), output_type="np",
    ).frames[0]  # fmt: skip
    assert np.array_equal(np.clip(np.round(frames * 255.0), 0, 255).astype(np.uint8), uninterrupted)

    # Another image, another video: the image is really read.
    moved = model.init_state(GenerationJob(**{**job.__dict__, "reference": picture(48, 32, seed=2)}))
    while moved.step < job.steps:
        model.step(moved)
    assert not np.array_equal(model.decode(moved), uninterrupted)


@pytest.mark.parametrize(
    ("kind", "options", "content_type"),
    [
        ("PNG", {}, "image/png"),
        ("JPEG", {}, "image/jpeg"),
        ("JPEG", {"progressive": True}, "image/jpeg"),
        ("WEBP", {}, "image/webp"),
        ("WEBP", {"lossless": True}, "image/webp"),
    ],
)
def test_format_and_dimensions_are_read_from_the_bytes(kind: str, options: dict, content_type: str) -> None:
    image = read_image(picture(48, 32, kind, **options))
    assert (image.content_type, image.width, image.height) == (content_type, 48, 32)
    for bad in (picture(8, 8, "GIF"), picture(8, 8, "BMP"), b"plain text, named first.png", b""):
        with pytest.raises(ApiError) as refused:
            read_image(bad)
        assert refused.value.status == 400 and refused.value.param == "input_reference"


async def test_the_openai_client_makes_a_video_from_an_image_and_survives_kill9(
    model_stack: ModelStack, catalogue: Catalogue, temporal_client: Client
) -> None:
    first, second = model_stack.gpu("i2v-1", I2V_MODEL), model_stack.gpu("i2v-2", I2V_MODEL)
    for proc in (first, second):
        await asyncio.to_thread(proc.wait_healthy, 120)
    image = picture(64, 64, "WEBP", lossless=True)
    sdk = openai.AsyncOpenAI(base_url=f"{model_stack.base_url}/v1", api_key=key_for(model_stack), max_retries=0)
    video = await sdk.videos.create(
        model=I2V_MODEL,  # type: ignore[arg-type]  # the SDK's type lists OpenAI's own models
        prompt="a red kite over the sea",
        size="64x64",  # type: ignore[arg-type]
        seconds="1",  # type: ignore[arg-type]
        input_reference=("first-frame.bin", image, "application/octet-stream"),
        extra_body={"seed": 21, "steps": 400},
    )
    assert video.status == "queued" and video.size == "64x64"
    handle = temporal_client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id(video.id))
    # The image is stored under the job and recorded in it.
    recorded = (await handle.query(VideoJobWorkflow.state)).request
    assert recorded.input_reference is not None and recorded.input_reference.content_type == "image/webp"
    assert recorded.input_reference.key.startswith(f"videos/{video.id}/input/")
    assert store_of(model_stack.settings).get(recorded.input_reference.key) == image
    expected = asyncio.create_task(
        asyncio.to_thread(reference_video, catalogue, recorded, {recorded.input_reference.key: image})
    )

    killed_at, _other = await kill9_after_first_checkpoint(handle, [first, second])
    state = await asyncio.wait_for(handle.result(), 240)
    assert state.status == VideoStatus.COMPLETED and state.result is not None, state
    assert state.result.attempt >= 2 and state.result.resumed_from_step >= killed_at > 0

    content = (await sdk.videos.download_content(video.id)).content
    assert probe_mp4(content)[:3] == ("h264", 64, 64)
    assert content == await expected


def test_the_replicate_client_makes_a_video_from_an_image(model_stack: ModelStack) -> None:
    worker = model_stack.gpu("i2v-replicate", I2V_MODEL)
    worker.wait_healthy(120)
    client = replicate.Client(api_token=key_for(model_stack), base_url=model_stack.base_url)
    ref = f"leasehold/{I2V_MODEL}"
    version = client.models.get(ref).latest_version
    assert version is not None
    assert "image" in version.openapi_schema["components"]["schemas"]["Input"]["required"]

    # run() with a file uploads it to the Files API and passes its URL as the input.
    first_frame = io.BytesIO(picture(48, 32, "JPEG"))
    output = client.run(ref, input={"prompt": "a green kite", "image": first_frame, "size": "48x32"})
    assert isinstance(output, str), output
    assert probe_mp4(FileOutput(output, client).read())[1:] == (48, 32, 9)
    upload = client.files.create(io.BytesIO(picture(48, 32)), filename="first.png")
    assert client.files.get(upload.id).size == upload.size > 0

    # With a version it honours file_encoding_strategy="base64": a data URI.
    prediction = client.predictions.create(
        version.id,
        {"prompt": "a blue kite", "image": io.BytesIO(picture(48, 32, "WEBP")), "size": "48x32", "seed": 3},
        file_encoding_strategy="base64",
    )
    prediction.wait()
    assert prediction.status == "succeeded", prediction.error
    assert isinstance(prediction.output, str)
    assert probe_mp4(FileOutput(prediction.output, client).read())[1:] == (48, 32, 9)

    stranger = replicate.Client(api_token=key_for(model_stack), base_url=model_stack.base_url)
    for caller, image, says in (
        (client, io.BytesIO(b"GIF89a not what it says"), "PNG, JPEG or WebP"),
        (client, io.BytesIO(picture(32, 32)), "32x32 but the video is 48x32"),
        # Another user's upload is no file of theirs.
        (stranger, upload.urls["get"], "no file"),
    ):
        with pytest.raises(ReplicateError) as refused:
            caller.predictions.create(
                version.id, {"prompt": "a kite", "image": image, "size": "48x32"}, file_encoding_strategy="base64"
            )
        # Replicate's invalid input: 422 naming the field, as every input error on this surface.
        assert refused.value.status == 422 and "input.image" in str(refused.value.detail), refused.value
        assert says in str(refused.value.detail)
    with pytest.raises(ReplicateError) as hidden:
        stranger.files.get(upload.id)
    assert hidden.value.status == 404
    assert client.files.delete(upload.id)


def _reference_keys(stack: ModelStack) -> list[str]:
    return [key for key in store_of(stack.settings).list("videos/") if "/input/" in key]


def test_bad_images_are_refused_naming_the_field_and_nothing_is_stored(model_stack: ModelStack) -> None:
    stored_before = _reference_keys(model_stack)
    fields = {"prompt": "a kite", "model": I2V_MODEL, "size": "64x64", "seconds": "1"}
    oversized = picture(64, 64)
    oversized += b"\0" * (MAX_REFERENCE_BYTES + 1 - len(oversized))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"files": {"input_reference": ("a.gif", picture(64, 64, "GIF"), "image/png")}}, "PNG, JPEG or WebP"),
        ({"files": {"input_reference": ("a.png", b"not an image at all", "image/png")}}, "PNG, JPEG or WebP"),
        ({"files": {"input_reference": ("a.png", picture(32, 48), "image/png")}}, "32x48 but the video is 64x64"),
        ({"files": {"input_reference": ("a.png", oversized, "image/png")}}, f"the most is {MAX_REFERENCE_BYTES}"),
        ({"data": {**fields, "model": MODEL}, "files": {"input_reference": ("a.png", picture(64, 64))}}, "no image"),
        ({}, "an image is required"),
    ]
    data_url = "data:image/png;base64," + base64.b64encode(picture(48, 32)).decode()
    json_cases: list[tuple[dict[str, Any], str]] = [
        ({"image_url": data_url}, "48x32 but the video is 64x64"),
        ({"file_id": "file-123"}, "file_id is not served here"),
        ({"image_url": "https://example.com/first.png"}, "data URL"),
    ]
    cases.append(({"data": {**fields, "input_reference[image_url]": data_url}}, "48x32 but the video is 64x64"))
    with httpx.Client(
        base_url=model_stack.base_url, headers={"Authorization": f"Bearer {key_for(model_stack)}"}, timeout=60
    ) as http:
        for case, says in cases:
            answer = http.post("/v1/videos", **{"data": fields, **case})
            assert answer.status_code == 400, (says, answer.text)
            error = answer.json()["error"]
            assert error["param"] == "input_reference" and says in error["message"], error
        for reference, says in json_cases:
            answer = http.post("/v1/videos", json={**fields, "input_reference": reference})
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["param"] == "input_reference" and says in error["message"], error
    # The SDK (2.x) itself sends input_reference only as a file: it refuses a reference object
    # before any request, so the object form above is for JSON and plain HTTP clients.
    sdk = openai.OpenAI(base_url=f"{model_stack.base_url}/v1", api_key=key_for(model_stack), max_retries=0)
    with pytest.raises(RuntimeError, match="input_reference"):
        sdk.videos.create(prompt="a kite", input_reference={"image_url": data_url})
    assert _reference_keys(model_stack) == stored_before


def test_a_json_image_url_is_stored_once_and_the_image_is_part_of_the_idempotent_body(
    model_stack: ModelStack,
) -> None:
    model_stack.gpu("i2v-json", I2V_MODEL).wait_healthy(120)
    first, other = picture(32, 32, seed=3), picture(32, 32, seed=4)
    # Long enough that the job still runs (and holds its image) while the test looks.
    body = {"prompt": "a kite", "model": I2V_MODEL, "size": "32x32", "seconds": "1", "steps": "1000"}

    def reference(image: bytes) -> dict[str, str]:
        return {"image_url": "data:image/png;base64," + base64.b64encode(image).decode()}

    def stored(video_id: str) -> list[str]:
        return [key for key in _reference_keys(model_stack) if key.startswith(f"videos/{video_id}/")]

    headers = {"Authorization": f"Bearer {key_for(model_stack)}", "Idempotency-Key": "first-frame"}
    with httpx.Client(base_url=model_stack.base_url, headers=headers, timeout=60) as http:
        created = http.post("/v1/videos", json={**body, "input_reference": reference(first)})
        assert created.status_code == 200, created.text
        video_id = created.json()["id"]
        keys = stored(video_id)
        assert len(keys) == 1 and keys[0].endswith(".png")
        again = http.post("/v1/videos", json={**body, "input_reference": reference(first)})
        assert again.status_code == 200 and again.json()["id"] == video_id
        # Another image under the same key is another body; the job's own image stays.
        conflict = http.post("/v1/videos", json={**body, "input_reference": reference(other)})
        assert conflict.status_code == 409, conflict.text
        assert stored(video_id) == keys
        assert store_of(model_stack.settings).get(keys[0]) == first
        # Deleting the video takes its image with it.
        assert http.delete(f"/v1/videos/{video_id}").status_code == 200
    assert stored(video_id) == []


def test_an_image_of_megabytes_reaches_the_predictions_api(model_stack: ModelStack) -> None:
    """The body limit of /v1/predictions, /v1/models/.../predictions and /v1/files is the video
    create's (an image up to 10 MiB as a data URL), not the 1 MiB of other JSON routes."""
    from PIL import Image, PngImagePlugin

    meta = PngImagePlugin.PngInfo()
    meta.add_text("padding", os.urandom(700_000).hex())  # ~1.4 MB: a valid 48x32 PNG
    big = io.BytesIO()
    Image.new("RGB", (48, 32), (10, 200, 30)).save(big, "PNG", pnginfo=meta)
    assert big.tell() > 1 << 20
    client = replicate.Client(api_token=key_for(model_stack), base_url=model_stack.base_url)
    version = client.models.get(f"leasehold/{I2V_MODEL}").latest_version
    assert version is not None
    big.seek(0)
    prediction = client.predictions.create(
        version.id, {"prompt": "a heavy kite", "image": big, "size": "48x32"}, file_encoding_strategy="base64"
    )
    assert prediction.status in ("starting", "processing"), prediction
    client.predictions.cancel(prediction.id)
    big.seek(0)
    assert client.files.create(big, filename="big.png").size > 1 << 20
