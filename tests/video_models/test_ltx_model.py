"""The LTX-Video family on tiny random weights: the loop is ``LTXPipeline.__call__`` (and
``LTXImageToVideoPipeline.__call__``) byte for byte, a checkpoint resumes byte-identically in a
new model object and in a fresh process, and through the real API and GPU worker processes a
job whose worker is killed (-9) mid-generation ends with the bytes of an uninterrupted run."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import torch
from PIL import Image
from temporalio.client import Client

from activities.video.generation import GenerationJob
from testing.process_stack import ORCHESTRATION
from tests.video_core.jobs import probe_mp4, store_of
from tests.video_models.conftest import Catalogue, ModelStack
from tests.video_models.runs import key_for, kill9_after_first_checkpoint, reference_video
from worker_gpu.models.ltx_video import DECODE_NOISE_SCALE, DECODE_TIMESTEP, LTXImageToVideoModel, LTXVideoModel
from workflows.video.catalogue import load_catalogue
from workflows.video.ids import workflow_id
from workflows.video.job import VideoJobWorkflow
from workflows.video.models import use_catalogue
from workflows.video.types import VideoRequest, VideoStatus

LTX = "ltx-tiny"
LTX_I2V = "ltx-i2v-tiny"


@pytest.fixture(scope="module")
def ltx(catalogue: Catalogue, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalogue]:
    """A catalogue file of the tiny LTX pipeline (weights relative to it) as text- and
    image-to-video entries over one folder, as a deployment serves the published one; installed
    in this process beside the package's Wan entries while this module runs."""
    from worker_gpu.models.tiny_ltx import build_tiny_ltx, tiny_ltx_entry

    root = tmp_path_factory.mktemp("ltx")
    weights = build_tiny_ltx(root / "weights" / "ltx-tiny")
    path = root / "catalogue.toml"
    path.write_text(
        tiny_ltx_entry(LTX, Path("weights/ltx-tiny"), max_steps=1000)
        + "\n"
        + tiny_ltx_entry(LTX_I2V, Path("weights/ltx-tiny"), family="ltx-i2v", max_steps=1000)
    )
    models = load_catalogue(path)
    use_catalogue({**catalogue.models, **models})
    try:
        yield Catalogue(path=path, weights=weights, models=models)
    finally:
        use_catalogue(catalogue.models)


@pytest.fixture(scope="module")
def model(ltx: Catalogue) -> LTXVideoModel:
    loaded = LTXVideoModel(ltx.models[LTX], device="cpu", threads=1)
    loaded.load()
    return loaded


@pytest.fixture(scope="module")
def i2v_model(ltx: Catalogue) -> LTXImageToVideoModel:
    loaded = LTXImageToVideoModel(ltx.models[LTX_I2V], device="cpu", threads=1)
    loaded.load()
    return loaded


def job_of(ltx: Catalogue, name: str = LTX, steps: int = 6, **fields: Any) -> GenerationJob:
    spec = ltx.models[name]
    values: dict[str, Any] = dict(
        model=name, prompt="a blue kite over the sea", seed=5, width=64, height=32,
        frames=spec.frame_count(1), fps=spec.fps, steps=steps,
    )  # fmt: skip
    return GenerationJob(**{**values, **fields})


def finish(model: LTXVideoModel, job: GenerationJob, data: bytes | None = None) -> np.ndarray:
    """The job run to its end (from the checkpoint ``data`` when given), decoded."""
    state = model.init_state(job) if data is None else model.load_state(job, data)
    while state.step < job.steps:
        model.step(state)
    return model.decode(state)


def checkpoint_after(model: LTXVideoModel, job: GenerationJob, steps: int) -> bytes:
    state = model.init_state(job)
    while state.step < steps:
        model.step(state)
    return model.save_state(state)


def as_uint8(frames: np.ndarray) -> np.ndarray:
    return np.clip(np.round(frames * 255.0), 0, 255).astype(np.uint8)


def call(model: LTXVideoModel, job: GenerationJob, global_seed: int, **inputs: Any) -> np.ndarray:
    """The pipeline's own ``__call__`` for ``job``, with torch's global generator seeded (the
    VAE decoder injects noise from it)."""
    spec = model.spec
    torch.manual_seed(global_seed)
    frames = model.pipe(
        prompt=job.prompt, negative_prompt=spec.negative_prompt, height=job.height, width=job.width,
        num_frames=job.frames, frame_rate=job.fps, num_inference_steps=job.steps,
        guidance_scale=spec.guidance_scale, generator=torch.Generator("cpu").manual_seed(job.seed),
        decode_timestep=DECODE_TIMESTEP, decode_noise_scale=DECODE_NOISE_SCALE, output_type="np", **inputs,
    ).frames[0]  # fmt: skip
    return as_uint8(frames)


def picture(width: int, height: int, seed: int = 1) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def test_the_loop_is_the_pipelines_call_and_resumes_byte_identically(model: LTXVideoModel, ltx: Catalogue) -> None:
    job = job_of(ltx)
    uninterrupted = finish(model, job)
    assert uninterrupted.shape == (9, 32, 64, 3) and uninterrupted.dtype == np.uint8
    assert np.array_equal(call(model, job, global_seed=job.seed), uninterrupted)
    # The decoder's own noise is real: another global seed is another video, so the loop's
    # seeding of it is what makes the bytes independent of the process's history.
    assert not np.array_equal(call(model, job, global_seed=job.seed + 1), uninterrupted)

    data = checkpoint_after(model, job, 3)
    other = LTXVideoModel(ltx.models[LTX], device="cpu", threads=1)
    other.load()
    assert np.array_equal(finish(other, job, data), uninterrupted)
    # Decoding twice gives the same video (the decode's noise comes from a copy of the generator).
    resumed = other.load_state(job, data)
    while resumed.step < job.steps:
        other.step(resumed)
    assert np.array_equal(other.decode(resumed), other.decode(resumed))

    # Without the generator's state the decode's noise differs: the test can tell.
    broken = other.load_state(job, data)
    broken.generator = torch.Generator("cpu").manual_seed(job.seed)
    while broken.step < job.steps:
        other.step(broken)
    assert not np.array_equal(other.decode(broken), uninterrupted)


def test_without_guidance_the_loop_is_still_the_call(ltx: Catalogue) -> None:
    # guidance_scale <= 1: no negative prompt, one transformer call on a batch of one.
    unguided = LTXVideoModel(dataclasses.replace(ltx.models[LTX], guidance_scale=1.0), device="cpu", threads=1)
    unguided.load()
    job = job_of(ltx, steps=3)
    state = unguided.init_state(job)
    assert state.negative_embeds is None and state.negative_mask is None
    assert np.array_equal(call(unguided, job, global_seed=job.seed), finish(unguided, job))
    assert np.array_equal(finish(unguided, job, checkpoint_after(unguided, job, 1)), finish(unguided, job))


def test_a_checkpoint_resumes_byte_identically_in_a_fresh_process(
    model: LTXVideoModel, ltx: Catalogue, tmp_path: Path
) -> None:
    job = job_of(ltx, steps=5, prompt="the lighthouse at dusk", seed=11)
    uninterrupted = finish(model, job)
    (tmp_path / "state").write_bytes(checkpoint_after(model, job, 2))
    (tmp_path / "job.json").write_text(json.dumps(dataclasses.asdict(job)))
    script = (
        "import json, sys, numpy as np\n"
        "from pathlib import Path\n"
        "from activities.video.generation import GenerationJob\n"
        "from worker_gpu.models import load_model\n"
        "from workflows.video.catalogue import load_catalogue\n"
        "root = Path(sys.argv[2])\n"
        "spec = load_catalogue(Path(sys.argv[1]))['ltx-tiny']\n"
        "job = GenerationJob(**json.loads((root / 'job.json').read_text()))\n"
        "model = load_model(spec, 'cpu', 1)\n"
        "state = model.load_state(job, (root / 'state').read_bytes())\n"
        "assert state.step == 2\n"
        "while state.step < job.steps:\n"
        "    model.step(state)\n"
        "np.save(root / 'frames.npy', model.decode(state))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(ltx.path), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.array_equal(np.load(tmp_path / "frames.npy"), uninterrupted)


def test_checkpoints_are_refused_for_another_version_size_or_family(
    model: LTXVideoModel, i2v_model: LTXImageToVideoModel, ltx: Catalogue
) -> None:
    job = job_of(ltx, steps=4)
    data = checkpoint_after(model, job, 1)
    newer = LTXVideoModel(dataclasses.replace(ltx.models[LTX], version="ltx-tiny-v2"), "cpu", 1)
    newer.load()
    with pytest.raises(ValueError, match="model version"):
        newer.load_state(job, data)
    with pytest.raises(ValueError, match="another size"):
        model.load_state(dataclasses.replace(job, width=32), data)
    with pytest.raises(ValueError):
        model.load_state(job, b"not a checkpoint")
    # A text-to-video state is no image-to-video state (both are stamped with their version).
    i2v_job = job_of(ltx, LTX_I2V, steps=4, reference=picture(64, 32), reference_sha256="-")
    with pytest.raises(ValueError):
        i2v_model.load_state(i2v_job, data)
    with pytest.raises(ValueError, match="fit"):
        model.load_state(dataclasses.replace(job, steps=0), data)
    with pytest.raises(ValueError, match="at least one step"):
        model.init_state(dataclasses.replace(job, steps=0))
    with pytest.raises(ValueError, match="multiples of 32"):
        model.init_state(dataclasses.replace(job, width=48))
    with pytest.raises(ValueError, match="not unipc"):
        LTXVideoModel(dataclasses.replace(ltx.models[LTX], scheduler="unipc"), "cpu", 1)
    preview = model.preview(model.init_state(job), 24)
    assert preview.dtype == np.uint8 and preview.shape[1:] == (12, 24, 3)


def test_image_to_video_is_the_pipelines_call_and_resumes_without_the_image(
    i2v_model: LTXImageToVideoModel, ltx: Catalogue
) -> None:
    image = picture(64, 32)
    job = job_of(ltx, LTX_I2V, reference=image, reference_sha256="-")
    uninterrupted = finish(i2v_model, job)
    pil = Image.open(io.BytesIO(image)).convert("RGB")
    assert np.array_equal(call(i2v_model, job, global_seed=job.seed, image=pil), uninterrupted)

    data = checkpoint_after(i2v_model, job, 3)
    other = LTXImageToVideoModel(ltx.models[LTX_I2V], device="cpu", threads=1)
    other.load()
    assert np.array_equal(finish(other, dataclasses.replace(job, reference=None), data), uninterrupted)
    # Another image, another video: the image is really read.
    assert not np.array_equal(finish(i2v_model, dataclasses.replace(job, reference=picture(64, 32, 2))), uninterrupted)


def test_the_docs_show_one_loadable_catalogue_entry_per_family() -> None:
    import re
    import tomllib

    from workflows.video.catalogue import parse_catalogue
    from workflows.video.models import FAMILIES

    docs = Path(__file__).resolve().parents[2] / "docs" / "models.md"
    blocks = re.findall(r"```toml\n(.*?)```", docs.read_text(), re.S)
    entries = "\n".join(block for block in blocks if block.lstrip().startswith("[models."))
    models = parse_catalogue(tomllib.loads(entries), docs.parent / "catalogue.toml")
    assert sorted(spec.family for spec in models.values()) == sorted(FAMILIES)
    ltx = models["ltx-video-2b-0.9.1"]
    assert ltx.frame_count(5) == 121 and ltx.memory_bytes_per_frame_pixel == 150


@pytest.fixture(scope="module")
def ltx_stack(temporal_address: str, ltx: Catalogue, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelStack]:
    """The API and an orchestration worker as real processes, serving the LTX catalogue file."""
    with ModelStack.running(
        temporal_address,
        tmp_path_factory.mktemp("ltx-stack"),
        ORCHESTRATION,
        model_catalogue=ltx.path,
        models=[LTX, LTX_I2V],
        # As the Wan stack's: a floor on each step so a checkpoint is seen before the job ends.
        video_step_pace_seconds_per_frame_megapixel=0.7,
    ) as stack:
        yield stack


@pytest.mark.slow
async def test_a_job_survives_kill9_of_its_worker_with_identical_bytes(
    ltx_stack: ModelStack, ltx: Catalogue, temporal_client: Client
) -> None:
    first, second = ltx_stack.gpu("ltx-1", LTX), ltx_stack.gpu("ltx-2", LTX)
    expected = VideoRequest(
        prompt="a red kite over the sea", model=LTX, seconds=1, width=64, height=64, seed=21, steps=300
    )
    reference = asyncio.create_task(asyncio.to_thread(reference_video, ltx, expected))
    for proc in (first, second):
        await asyncio.to_thread(proc.wait_healthy, 120)
    body = {"prompt": expected.prompt, "model": LTX, "size": "64x64", "seconds": "1", "seed": 21, "steps": 300}
    async with httpx.AsyncClient(
        base_url=ltx_stack.base_url, headers={"Authorization": f"Bearer {key_for(ltx_stack)}"}, timeout=30
    ) as http:
        created = await http.post("/v1/videos", json=body)
        assert created.status_code == 200, created.text
        video_id = created.json()["id"]
        handle = temporal_client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id(video_id))
        killed_at, _other = await kill9_after_first_checkpoint(handle, [first, second])
        state = await asyncio.wait_for(handle.result(), 180)
        assert state.status == VideoStatus.COMPLETED and state.result is not None, state
        assert state.result.attempt >= 2 and state.result.resumed_from_step >= killed_at > 0
        content = await http.get(f"/v1/videos/{video_id}/content")
        assert content.status_code == 200
        assert probe_mp4(content.content) == ("h264", 64, 64, 9)
        assert content.content == await reference


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")
async def test_the_openai_client_makes_an_ltx_video_from_an_image_and_survives_kill9(
    ltx_stack: ModelStack, ltx: Catalogue, temporal_client: Client
) -> None:
    first, second = ltx_stack.gpu("ltx-i2v-1", LTX_I2V), ltx_stack.gpu("ltx-i2v-2", LTX_I2V)
    for proc in (first, second):
        await asyncio.to_thread(proc.wait_healthy, 120)
    image = picture(64, 64, seed=7)
    sdk = openai.AsyncOpenAI(base_url=f"{ltx_stack.base_url}/v1", api_key=key_for(ltx_stack), max_retries=0)
    video = await sdk.videos.create(
        model=LTX_I2V,  # type: ignore[arg-type]  # the SDK's type lists OpenAI's own models
        prompt="a green kite",
        size="64x64",  # type: ignore[arg-type]
        seconds="1",  # type: ignore[arg-type]
        input_reference=("first.png", image, "image/png"),
        extra_body={"seed": 3, "steps": 300},
    )
    handle = temporal_client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id(video.id))
    recorded = (await handle.query(VideoJobWorkflow.state)).request
    assert recorded.input_reference is not None
    assert store_of(ltx_stack.settings).get(recorded.input_reference.key) == image
    expected = asyncio.create_task(
        asyncio.to_thread(reference_video, ltx, recorded, {recorded.input_reference.key: image})
    )
    killed_at, _other = await kill9_after_first_checkpoint(handle, [first, second])
    state = await asyncio.wait_for(handle.result(), 240)
    assert state.status == VideoStatus.COMPLETED and state.result is not None, state
    assert state.result.attempt >= 2 and state.result.resumed_from_step >= killed_at > 0
    content = (await sdk.videos.download_content(video.id)).content
    assert probe_mp4(content)[:3] == ("h264", 64, 64)
    assert content == await expected
