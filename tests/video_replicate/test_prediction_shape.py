"""The prediction object and the input mapping, without a stack: a job's states as Replicate
shows them, and Replicate's input fields as the create request ``/v1/videos`` takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from replicate.prediction import Prediction

from api.replicate.inputs import create_request
from api.replicate.predictions import prediction_of
from api.replicate.problems import Problem
from api.video.memo import JobMemo
from api.video.views import JobView
from leasehold.records.api_keys import Principal
from leasehold.storage import LocalObjectStore
from workflows.video.models import PROCEDURAL_V1
from workflows.video.types import GenerateResult, VideoJobState, VideoRequest, VideoStatus

BASE = "http://127.0.0.1:9"
OWNER = Principal(tenant_id="t", user_id="u", tier="paid", key_id="k")
CREATED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _view(status: VideoStatus, **state: object) -> JobView:
    request = VideoRequest(prompt="a kite", model=PROCEDURAL_V1.name, seconds=1, width=180, height=320, seed=3)
    job_state = VideoJobState(
        job_id="vid_" + "0" * 32,
        tenant_id="t",
        user_id="u",
        tier="paid",
        request=request,
        request_hash="h",
        status=status,
        created_at=CREATED,
        **state,  # type: ignore[arg-type]
    )
    memo = JobMemo(**request.model_dump(), request_hash="h", created_at=CREATED.timestamp(), expires_after_seconds=60)
    return JobView(
        job_id=job_state.job_id,
        memo=memo,
        owner=OWNER,
        status=status,
        state=job_state,
        completed_at=job_state.completed_at,
        attempt=job_state.attempts_started,
        progress=100 if status is VideoStatus.COMPLETED else 0,
    )


def _render(view: JobView, store: LocalObjectStore) -> dict:
    return prediction_of(view, store, BASE, 600)


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path, b"k" * 32, BASE)


def test_a_completed_job_is_a_succeeded_prediction_with_a_signed_output(store: LocalObjectStore) -> None:
    done = CREATED + timedelta(seconds=30)
    result = GenerateResult(
        video_key="videos/x/attempt-1/video.mp4",
        thumbnail_key="videos/x/attempt-1/thumb.webp",
        attempt=1,
        width=180,
        height=320,
        frames=8,
        fps=8,
        total_steps=4,
        gpu_seconds=2.5,
    )
    body = _render(_view(VideoStatus.COMPLETED, completed_at=done, attempts_started=1, result=result), store)
    assert body["status"] == "succeeded" and body["error"] is None
    assert body["output"].startswith(f"{BASE}/v1/files?") and "sig=" in body["output"]
    assert body["metrics"] == {"predict_time": 2.5}
    assert body["completed_at"] == "2026-12-01T12:00:30.000000Z"
    assert body["started_at"] == "2026-12-01T12:00:27.500000Z"
    # The client's own model of it: the progress it parses from the logs.
    prediction = Prediction(**body)
    assert prediction.progress is not None and (prediction.progress.current, prediction.progress.total) == (100, 100)


@pytest.mark.parametrize(
    ("status", "state", "shown", "error"),
    [
        (VideoStatus.QUEUED, {}, "starting", None),
        (VideoStatus.IN_PROGRESS, {"attempts_started": 1}, "processing", None),
        (VideoStatus.FAILED, {"error_message": "the model ran out of memory"}, "failed", "the model ran out of memory"),
        (VideoStatus.FAILED, {}, "failed", "generation failed"),
        (VideoStatus.CANCELLED, {}, "canceled", None),
        (VideoStatus.EXPIRED, {}, "succeeded", None),
    ],
)
def test_every_job_status_has_its_prediction_status(
    store: LocalObjectStore, status: VideoStatus, state: dict, shown: str, error: str | None
) -> None:
    body = _render(_view(status, **state), store)
    assert (body["status"], body["error"], body["output"]) == (shown, error, None)
    assert body["data_removed"] is (status is VideoStatus.EXPIRED)
    assert body["urls"]["stream"] == f"{BASE}/v1/predictions/{body['id']}/stream"
    Prediction(**body)  # the client reads every one of them


@pytest.mark.parametrize(
    ("fields", "seconds", "size"),
    [
        ({"num_frames": 17}, 3, None),
        ({"num_frames": 8}, 1, None),
        ({"resolution": "180p"}, None, "320x180"),
        ({"resolution": "180p", "aspect_ratio": "9:16"}, None, "180x320"),
        ({"resolution": "256x256"}, None, "256x256"),
        ({"width": 320, "height": 180}, None, "320x180"),
        ({"seconds": "2"}, 2, None),
    ],
)
def test_inputs_map_onto_the_create_request(fields: dict, seconds: int | None, size: str | None) -> None:
    request = create_request({"prompt": "a kite", **fields}, PROCEDURAL_V1)
    assert (request.seconds, request.size, request.model) == (seconds, size, PROCEDURAL_V1.name)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"num_frames": 8, "seconds": 1}, "input.num_frames"),
        ({"resolution": "999p"}, "input.resolution"),
        ({"resolution": "180p", "aspect_ratio": "4:3"}, "input.aspect_ratio"),
        ({"width": 320}, "input.height"),
        ({"size": "320x180", "resolution": "180p"}, "input.resolution"),
        ({"num_frames": 0}, "input.num_frames"),
        ({"seed": True}, "input.seed"),
    ],
)
def test_conflicting_or_malformed_inputs_name_the_field(fields: dict, named: str) -> None:
    with pytest.raises(Problem) as refused:
        create_request({"prompt": "a kite", **fields}, PROCEDURAL_V1)
    assert refused.value.status == 422
    assert refused.value.extra["invalid_fields"][0]["field"] == named
