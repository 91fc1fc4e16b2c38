"""Replay recorded lifecycle workflow histories: a change that would break a running tick fails
here. Record more with ``python -m tests.lifecycle.record_histories`` (it never overwrites a file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from tests.history_builds import replay_failure
from workflows.lifecycle.ci.workflows import CILogCompactionWorkflow, CIRetentionWorkflow
from workflows.lifecycle.video.workflows import VideoExpiryWorkflow, VideoOrphanSweepWorkflow

HISTORIES = Path(__file__).parent / "histories"
WORKFLOWS = [VideoExpiryWorkflow, VideoOrphanSweepWorkflow, CILogCompactionWorkflow, CIRetentionWorkflow]
RECORDED = sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"lifecycle-{path.stem}", path.read_text())


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    failure = await replay_failure(WORKFLOWS, load(path))
    assert failure is None, f"{path.name}: {failure!r}"


def test_every_lifecycle_workflow_has_a_recorded_history_of_several_batches() -> None:
    recorded: dict[str, int] = {}
    for path in RECORDED:
        history = load(path)
        name = history.events[0].workflow_execution_started_event_attributes.workflow_type.name
        batches = sum(1 for e in history.events if e.HasField("activity_task_scheduled_event_attributes"))
        recorded[name] = max(recorded.get(name, 0), batches)
    assert {w.__name__ for w in WORKFLOWS} <= set(recorded), f"missing: {recorded}"
    assert all(n >= 2 for n in recorded.values()), recorded
