"""Replay recorded VideoJobWorkflow histories: a change that would break running jobs fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.video.job import VideoJobWorkflow

HISTORIES = Path(__file__).parent / "histories"


@pytest.mark.parametrize(
    "name",
    [
        "completed",
        "failed",
        "cancelled",
        "completed_signalled",
        # Since the read model (patch ``video-read-model``).
        "completed_read_model",
        "failed_read_model",
        "cancelled_read_model",
    ],
)
async def test_recorded_history_replays(name: str) -> None:
    history = WorkflowHistory.from_json(f"video-{name}", (HISTORIES / f"{name}.json").read_text())
    replayer = Replayer(workflows=[VideoJobWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


def test_signalled_history_holds_the_start_signal() -> None:
    history = (HISTORIES / "completed_signalled.json").read_text()
    assert "generation_started" in history


@pytest.mark.parametrize("name", ["completed_read_model", "failed_read_model", "cancelled_read_model"])
def test_read_model_histories_write_the_outcome_last(name: str) -> None:
    """The last activity of every outcome is the read model's write (the flush before closing)."""
    events = json.loads((HISTORIES / f"{name}.json").read_text())["events"]
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    ]
    assert scheduled[-1] == "project_video_job", scheduled
    assert scheduled.count("project_video_job") >= 2, scheduled
