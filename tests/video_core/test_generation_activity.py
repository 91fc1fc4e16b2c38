"""The generation activity in isolation: ActivityEnvironment, a real model, a local store."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.activity import ActivityCancellationDetails
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.video.checkpoints import JobCheckpoints
from activities.video.generation import VideoGenerationActivities
from leasehold.storage import LocalObjectStore
from tests.video_core.jobs import request
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.procedural import ProceduralVideoModel
from workflows.video.types import GenerateInput, GenerateProgress, GenerateResult, VideoErrorType, VideoRequest

PREFIX = "videos/video_unit"
SMALL = request(seconds=1, width=180, height=320, steps=8)


@pytest.fixture(scope="module")
def model() -> ProceduralVideoModel:
    loaded = ProceduralVideoModel(device="cpu", threads=1)
    loaded.load()
    return loaded


def make_store(root: Path) -> LocalObjectStore:
    return LocalObjectStore(root, b"unit-test-key", "http://127.0.0.1:1")


def make_env(attempt: int = 1) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, heartbeat_timeout=timedelta(seconds=30))
    return env


def generate_input(req: VideoRequest = SMALL, interval: float = 0.0) -> GenerateInput:
    return GenerateInput(job_id="video_unit", request=req, object_prefix=PREFIX, checkpoint_interval_seconds=interval)


def run(
    model: ProceduralVideoModel, store: LocalObjectStore, env: ActivityEnvironment, input: GenerateInput
) -> tuple[VideoGenerationActivities, GenerateResult]:
    activities = VideoGenerationActivities(model, H264Encoder(), store)
    return activities, env.run(activities.generate_video, input)


def reference_video(model: ProceduralVideoModel, root: Path, req: VideoRequest = SMALL) -> bytes:
    """The video of an uninterrupted run."""
    store = make_store(root)
    _, result = run(model, store, make_env(), generate_input(req, interval=1000))
    return store.get(result.video_key)


def checkpoint_steps(store: LocalObjectStore) -> list[tuple[int, str]]:
    keys = [k for k in store.list(PREFIX + "/") if k.endswith(".json")]
    return sorted((int(k.rsplit("step-", 1)[1].removesuffix(".json")), k) for k in keys)


def test_heartbeats_checkpoints_after_upload_and_keeps_two(model: ProceduralVideoModel, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    env = make_env()
    seen: list[GenerateProgress] = []
    committed_when_announced: list[bool] = []

    def on_heartbeat(*details: object) -> None:
        progress = details[0]
        assert isinstance(progress, GenerateProgress)
        seen.append(progress.model_copy())
        if progress.checkpoint_key:
            # A checkpoint is announced only after its state and manifest are both stored.
            state_key = progress.checkpoint_key.removesuffix(".json") + ".state"
            committed_when_announced.append(store.exists(progress.checkpoint_key) and store.exists(state_key))

    env.on_heartbeat = on_heartbeat
    _, result = run(model, store, env, generate_input(interval=0.0))

    steps = [p.step for p in seen]
    assert steps == sorted(steps) and steps[-1] == 8
    assert all(p.total_steps == 8 and p.attempt == 1 for p in seen)
    assert committed_when_announced and all(committed_when_announced)
    # A checkpoint after every step but the last; only the newest two remain.
    assert [step for step, _ in checkpoint_steps(store)] == [6, 7]
    assert result.video_key == f"{PREFIX}/attempt-1/video.mp4"
    assert result.thumbnail_key == f"{PREFIX}/attempt-1/thumbnail.webp"
    assert result.spritesheet_key == f"{PREFIX}/attempt-1/spritesheet.jpg"
    assert (result.frames, result.width, result.height, result.resumed_from_step) == (8, 180, 320, 0)


def test_same_seed_same_bytes_other_seed_or_prompt_differs(model: ProceduralVideoModel, tmp_path: Path) -> None:
    first = reference_video(model, tmp_path / "a")
    again = reference_video(model, tmp_path / "b")
    other_seed = reference_video(model, tmp_path / "c", request(seconds=1, width=180, height=320, steps=8, seed=8))
    other_prompt = reference_video(
        model, tmp_path / "d", request(prompt="green forest at night", seconds=1, width=180, height=320, steps=8)
    )
    assert first == again
    assert other_seed != first
    assert other_prompt != first


def test_cancel_stops_between_steps_without_writing_a_video(model: ProceduralVideoModel, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    env = make_env()
    steps: list[int] = []

    def on_heartbeat(*details: object) -> None:
        progress = details[0]
        assert isinstance(progress, GenerateProgress)
        steps.append(progress.step)
        if progress.step == 3:
            env.cancel()

    env.on_heartbeat = on_heartbeat
    with pytest.raises(CancelledError):
        run(model, store, env, generate_input(interval=1000))
    assert max(steps) == 3
    assert not [k for k in store.list(PREFIX + "/") if k.endswith((".mp4", ".webp"))]


def test_lost_lease_writes_nothing_more(model: ProceduralVideoModel, tmp_path: Path) -> None:
    store = make_store(tmp_path)
    env = make_env()
    at_loss: list[list[str]] = []

    def on_heartbeat(*details: object) -> None:
        progress = details[0]
        assert isinstance(progress, GenerateProgress)
        if progress.step == 4 and not at_loss:
            at_loss.append(store.list(PREFIX + "/"))
            env.cancel(ActivityCancellationDetails(not_found=True))

    env.on_heartbeat = on_heartbeat
    with pytest.raises(CancelledError):
        run(model, store, env, generate_input(interval=0.0))
    assert at_loss and store.list(PREFIX + "/") == at_loss[0]


def test_preemption_checkpoints_at_the_notice_and_resume_is_byte_identical(
    model: ProceduralVideoModel, tmp_path: Path
) -> None:
    store = make_store(tmp_path / "job")
    env = make_env(attempt=1)
    activities = VideoGenerationActivities(model, H264Encoder(), store)

    def on_heartbeat(*details: object) -> None:
        progress = details[0]
        assert isinstance(progress, GenerateProgress)
        if progress.step == 5:
            activities.notify_preemption()

    env.on_heartbeat = on_heartbeat
    with pytest.raises(ApplicationError) as raised:
        env.run(activities.generate_video, generate_input(interval=1000))
    assert raised.value.type == VideoErrorType.PREEMPTED and not raised.value.non_retryable
    # No periodic checkpoint was due: the notice alone produced this one, at the step reached.
    assert [step for step, _ in checkpoint_steps(store)] == [5]

    _, result = run(model, store, make_env(attempt=2), generate_input(interval=1000))
    assert result.resumed_from_step == 5 and result.attempt == 2
    assert result.video_key.startswith(f"{PREFIX}/attempt-2/")
    assert store.get(result.video_key) == reference_video(model, tmp_path / "reference")


def test_resume_uses_newest_valid_checkpoint(model: ProceduralVideoModel, tmp_path: Path) -> None:
    store = make_store(tmp_path / "job")
    env = make_env(attempt=1)

    def on_heartbeat(*details: object) -> None:
        progress = details[0]
        assert isinstance(progress, GenerateProgress)
        if progress.step == 6:
            env.cancel(ActivityCancellationDetails(timed_out=True))

    env.on_heartbeat = on_heartbeat
    with pytest.raises(CancelledError):
        run(model, store, env, generate_input(interval=0.0))
    [(_, older), (newest_step, newest)] = checkpoint_steps(store)
    assert newest_step == 5
    # The newest committed checkpoint got corrupted, and a later upload never committed.
    store.put(newest.removesuffix(".json") + ".state", b"torn upload")
    store.put(f"{PREFIX}/attempt-1/checkpoints/step-000006.state", b"no manifest yet")

    resumed = JobCheckpoints(store, PREFIX, 2).newest_valid(
        # Any fingerprint check passes through load; the real one is computed by the activity.
        fingerprint=_manifest_fingerprint(store, older),
        load=lambda data: data,
    )
    assert resumed is not None and resumed.manifest_key == older

    _, result = run(model, store, make_env(attempt=2), generate_input(interval=1000))
    assert result.resumed_from_step == 4
    assert store.get(result.video_key) == reference_video(model, tmp_path / "reference")


def _manifest_fingerprint(store: LocalObjectStore, key: str) -> str:
    from activities.video.checkpoints import CheckpointManifest

    return CheckpointManifest.model_validate_json(store.get(key)).fingerprint


@pytest.mark.parametrize(
    ("req", "error_type"),
    [
        (request(width=100, height=100), VideoErrorType.INVALID_REQUEST),
        (request(seconds=60), VideoErrorType.INVALID_REQUEST),
        (request(steps=0), VideoErrorType.INVALID_REQUEST),
        (request().model_copy(update={"model": "other-v9"}), VideoErrorType.INVALID_REQUEST),
    ],
)
def test_bad_request_fails_for_good(
    model: ProceduralVideoModel, tmp_path: Path, req: VideoRequest, error_type: VideoErrorType
) -> None:
    with pytest.raises(ApplicationError) as raised:
        run(model, make_store(tmp_path), make_env(), generate_input(req))
    assert raised.value.type == error_type and raised.value.non_retryable
