"""The tiny Wan pipeline through the real API and real GPU worker processes: /v1/models with the
openai SDK, a job that completes as H.264 of the requested size, and a job whose workers are
killed (-9) and preempted (SIGTERM) that still ends with the bytes of an uninterrupted run."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import openai
import pytest
from temporalio.client import Client

from tests.video_core.jobs import busy_worker, pending_progress, probe_mp4, wait_for
from tests.video_models.conftest import I2V_MODEL, MODEL, PROCEDURAL, V2V_MODEL, Catalogue, ModelStack
from tests.video_models.runs import checkpointed, key_for, kill9_after_first_checkpoint, reference_video
from workflows.video.ids import workflow_id
from workflows.video.job import VideoJobWorkflow
from workflows.video.types import VideoRequest, VideoStatus

pytestmark = pytest.mark.slow


def test_models_list_and_retrieve_with_the_openai_sdk(model_stack: ModelStack, catalogue: Catalogue) -> None:
    key = key_for(model_stack)
    sdk = openai.OpenAI(base_url=f"{model_stack.base_url}/v1", api_key=key, max_retries=0, timeout=30)
    listed = sdk.models.list()
    assert [m.id for m in listed.data] == [MODEL, I2V_MODEL, V2V_MODEL, PROCEDURAL]
    assert all(m.object == "model" and m.owned_by == "leasehold" for m in listed.data)
    wan = sdk.models.retrieve(MODEL)
    assert wan.id == MODEL and wan.created == 1767225600
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("no-such-model")

    with httpx.Client(base_url=model_stack.base_url, timeout=30) as http:
        raw = http.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert raw.status_code == 200
        body = raw.json()
        assert body["object"] == "list"
        entry = body["data"][0]
        assert entry["sizes"] == ["32x32", "48x32", "64x64"] and entry["fps"] == 8
        # Where the weights live is the operator's business.
        assert str(catalogue.weights) not in raw.text and "weights" not in raw.text
        assert http.get("/v1/models").status_code == 401
        # Requests are validated against the catalogue file's entry.
        bad = http.post(
            "/v1/videos",
            headers={"Authorization": f"Bearer {key}"},
            json={"prompt": "x", "model": MODEL, "size": "720x1280", "seconds": "1"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "size"


async def test_a_job_completes_and_survives_kill9_and_sigterm_with_identical_bytes(
    model_stack: ModelStack, catalogue: Catalogue, temporal_client: Client
) -> None:
    first, second = model_stack.gpu("gpu-1"), model_stack.gpu("gpu-2")
    request_body: dict[str, Any] = {"prompt": "a red kite over the sea", "model": MODEL, "size": "64x64"}
    request_body.update(seconds="1", seed=21, steps=400)
    expected = VideoRequest(
        prompt=request_body["prompt"], model=MODEL, seconds=1, width=64, height=64, seed=21, steps=400
    )
    reference = await asyncio.to_thread(reference_video, catalogue, expected)
    for proc in (first, second):
        await asyncio.to_thread(proc.wait_healthy, 120)
    key = key_for(model_stack)
    async with httpx.AsyncClient(
        base_url=model_stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        created = await http.post("/v1/videos", json=request_body)
        assert created.status_code == 200, created.text
        video_id = created.json()["id"]
        handle = temporal_client.get_workflow_handle_for(VideoJobWorkflow.run, workflow_id(video_id))

        # kill -9 of the busy worker after its first checkpoint: the other one takes the job
        # over after the heartbeat timeout and resumes from that checkpoint.
        killed_at, other = await kill9_after_first_checkpoint(handle, [first, second])

        # SIGTERM (the preemption notice) to that one after its own first checkpoint: it
        # checkpoints at once, exits cleanly, and a third worker finishes the job.
        await wait_for(lambda: checkpointed(handle, 2, killed_at), 90, "a checkpoint of the next attempt")
        assert await busy_worker([other]) is other
        progress, _attempt, _started = await pending_progress(handle)
        assert progress is not None
        step_at_notice = progress.step
        other.signal(signal.SIGTERM)
        assert other.proc is not None
        assert await asyncio.to_thread(other.proc.wait, 60) == 0
        model_stack.gpu("gpu-3")

        state = await asyncio.wait_for(handle.result(), 180)
        assert state.status == VideoStatus.COMPLETED and state.result is not None, state
        assert state.result.attempt >= 3
        # The last attempt started where the preempted one stopped, not from scratch.
        assert state.result.resumed_from_step >= step_at_notice > killed_at > 0

        content = await http.get(f"/v1/videos/{video_id}/content")
        assert content.status_code == 200
        codec, width, height, frames = probe_mp4(content.content)
        assert (codec, width, height) == ("h264", 64, 64)
        assert frames == catalogue.models[MODEL].frame_count(1) == 9
        assert content.content == reference
