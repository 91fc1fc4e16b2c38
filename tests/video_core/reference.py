"""Uninterrupted reference runs, computed in the test process, to compare worker output against.

The test process and the worker processes run the same model code with the same thread
count, so equal bytes also show that results do not depend on which process computed them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from datetime import timedelta
from functools import cache
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.video.generation import VideoGenerationActivities
from leasehold.storage import LocalObjectStore
from worker_gpu.encoding import H264Encoder
from worker_gpu.models.procedural import ProceduralVideoModel
from workflows.video.types import GenerateInput, VideoRequest


@cache
def _model() -> ProceduralVideoModel:
    model = ProceduralVideoModel(device="cpu", threads=1)
    model.load()
    return model


def reference_video(request: VideoRequest) -> bytes:
    return _reference(request.model_dump_json())


@cache
def _reference(request_json: str) -> bytes:
    request = VideoRequest.model_validate_json(request_json)
    with tempfile.TemporaryDirectory(prefix="leasehold-reference-") as tmp:
        store = LocalObjectStore(Path(tmp), b"reference", "http://127.0.0.1:1")
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=60))
        activities = VideoGenerationActivities(_model(), H264Encoder(), store)
        result = env.run(
            activities.generate_video,
            GenerateInput(job_id="reference", request=request, object_prefix="ref", checkpoint_interval_seconds=1e9),
        )
        return store.get(result.video_key)
