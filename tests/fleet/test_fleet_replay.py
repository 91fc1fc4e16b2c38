"""Replay the FleetWorkflow histories recorded by this build: a change to the controller's
commands fails here unless it comes with a new build id (``docs/versioning.md``). Record with
``python -m tests.fleet.record_histories`` (it never overwrites a file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from activities.fleet.definitions import APPLY_FLEET, OBSERVE_FLEET
from tests.history_builds import check_recorded_by_this_build, replay_failure, replayed
from workflows.fleet.controller import FleetWorkflow
from workflows.fleet.types import FleetInput
from workflows.version import BUILD_ID

HISTORIES = Path(__file__).parent / "histories"
SCENARIOS = ["burst_outage_shrink"]
REPLAYED = replayed(HISTORIES)


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"fleet-{path.stem}", path.read_text())


def test_the_histories_are_this_builds() -> None:
    check_recorded_by_this_build(HISTORIES, load)
    assert sorted(p.stem for p in (HISTORIES / BUILD_ID).glob("*.json")) == SCENARIOS


@pytest.mark.parametrize("path", REPLAYED, ids=[f"{p.parent.name}/{p.stem}" for p in REPLAYED])
async def test_recorded_history_replays(path: Path) -> None:
    failure = await replay_failure([FleetWorkflow], load(path))
    assert failure is None, f"{path.name}: {failure!r}"


def test_the_recording_holds_growth_an_outage_and_continue_as_new() -> None:
    """What the recorded run covers: every tick observes then applies (three ticks), one apply
    failed, and the run ended by continuing as new with the decisions it kept."""
    events = load(HISTORIES / BUILD_ID / "burst_outage_shrink.json").events
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == [OBSERVE_FLEET, APPLY_FLEET] * 3, scheduled
    assert sum(e.HasField("activity_task_failed_event_attributes") for e in events) == 1
    last = events[-1]
    assert last.HasField("workflow_execution_continued_as_new_event_attributes")
    [payload] = last.workflow_execution_continued_as_new_event_attributes.input.payloads
    carried = FleetInput.model_validate(json.loads(payload.data))
    assert carried.ticks == 3
    # The growth, the failed apply and the shrink each changed something: all three are kept.
    assert [d.error is not None for d in carried.decisions] == [False, True, False], carried.decisions
    grown, _failed, shrunk = carried.decisions
    assert grown.started and grown.pools[0].desired > grown.pools[0].current
    assert shrunk.retired and shrunk.pools[0].desired < shrunk.pools[0].current
