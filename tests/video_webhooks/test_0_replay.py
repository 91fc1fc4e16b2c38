"""Histories recorded with completion webhooks (patch ``video-webhooks``) replay, and old ones
(tests/video_core/test_video_job_replay.py) still replay without the delivery."""

from __future__ import annotations

import base64
import json

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.video.definitions import DELIVER_VIDEO_EVENT, PROJECT_VIDEO_JOB
from tests.video_core.test_video_job_replay import HISTORIES
from workflows.video.job import WEBHOOKS_PATCH, VideoJobWorkflow


@pytest.mark.parametrize("name", ["completed_webhooks", "failed_webhooks", "cancelled_webhooks"])
async def test_webhook_histories_replay_and_deliver_after_the_row(name: str) -> None:
    text = (HISTORIES / f"{name}.json").read_text()
    history = WorkflowHistory.from_json(f"video-{name}", text)
    result = await Replayer(workflows=[VideoJobWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is None
    events = json.loads(text)["events"]
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    ]
    # The outcome is in the row before anyone is told about it.
    assert scheduled[-2:] == [PROJECT_VIDEO_JOB, DELIVER_VIDEO_EVENT], scheduled
    patches = [
        json.loads(
            base64.b64decode(e["markerRecordedEventAttributes"]["details"]["patch-data"]["payloads"][0]["data"])
        )["id"]
        for e in events
        if "markerRecordedEventAttributes" in e
    ]
    assert WEBHOOKS_PATCH in patches, patches


@pytest.mark.parametrize("name", ["completed_read_model", "cancelled_read_model"])
def test_histories_before_the_patch_hold_no_delivery(name: str) -> None:
    assert DELIVER_VIDEO_EVENT not in (HISTORIES / f"{name}.json").read_text()
