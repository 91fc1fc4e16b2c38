"""Replay the VideoJobWorkflow histories recorded by this build: a change that would break
running jobs fails here unless it comes with a new build id (``docs/versioning.md``). Record
with ``python -m tests.video_core.record_histories`` (it never overwrites a file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from activities.video.definitions import DELIVER_VIDEO_EVENT, PROJECT_VIDEO_JOB
from tests.history_builds import check_recorded_by_this_build, replay_failure, replayed
from workflows.queues import PREEMPTIBLE, RESERVED
from workflows.version import BUILD_ID
from workflows.video.job import VideoJobWorkflow

HISTORIES = Path(__file__).parent / "histories"
OUTCOMES = ["completed", "failed", "cancelled", "handed_over"]
REPLAYED = replayed(HISTORIES)


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"video-{path.stem}", path.read_text())


def recorded(name: str) -> WorkflowHistory:
    """This build's recording of the outcome ``name``."""
    return load(HISTORIES / BUILD_ID / f"{name}.json")


def test_the_histories_are_this_builds() -> None:
    check_recorded_by_this_build(HISTORIES, load)
    assert sorted(p.stem for p in (HISTORIES / BUILD_ID).glob("*.json")) == sorted(OUTCOMES)


@pytest.mark.parametrize("path", REPLAYED, ids=[f"{p.parent.name}/{p.stem}" for p in REPLAYED])
async def test_recorded_history_replays(path: Path) -> None:
    failure = await replay_failure([VideoJobWorkflow], load(path))
    assert failure is None, f"{path.name}: {failure!r}"


def test_the_completed_history_holds_the_start_signal() -> None:
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in recorded("completed").events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signals == ["generation_started"], signals


@pytest.mark.parametrize("name", OUTCOMES)
def test_every_outcome_is_written_then_delivered(name: str) -> None:
    """The last write is the read model's (the flush before closing), and only then are the
    owner's webhooks told: the outcome is in the row before anyone hears of it."""
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in recorded(name).events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled[-2:] == [PROJECT_VIDEO_JOB, DELIVER_VIDEO_EVENT], scheduled
    assert scheduled.count(PROJECT_VIDEO_JOB) >= 2, scheduled


def test_the_handed_over_history_moves_between_capacity_queues() -> None:
    """A paid job whose reserved queue had no worker within the wait timed out there
    (schedule-to-start, not retried) and ran on preemptible capacity: the replay test holds the
    hand-over's commands to this build too."""
    events = recorded("handed_over").events
    queues = [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "generate_video"
    ]
    assert [q.rsplit("@", 1)[-1] for q in queues] == [RESERVED, PREEMPTIBLE], queues
    timeouts = [
        e.activity_task_timed_out_event_attributes.failure.message
        for e in events
        if e.HasField("activity_task_timed_out_event_attributes")
    ]
    assert timeouts == ["activity ScheduleToStart timeout"], timeouts
