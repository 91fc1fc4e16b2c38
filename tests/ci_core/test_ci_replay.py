"""Replay recorded CI workflow histories: a change that would break running pushes, runs, tenant
semaphores or reconciler passes fails here. Record more with
``python -m tests.ci_core.record_histories`` (it never overwrites a file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.ci.push import CIPushWorkflow
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.run import CIRunWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow

HISTORIES = Path(__file__).parent / "histories"
WORKFLOWS = [CIPushWorkflow, CIRunWorkflow, CITenantSemaphoreWorkflow, CIReconcileWorkflow]
RECORDED = sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"ci-{path.stem}", path.read_text())


def workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays(path: Path) -> None:
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


def test_every_ci_workflow_has_a_recorded_history() -> None:
    recorded = {workflow_type(load(p)) for p in RECORDED}
    # Each is registered under its class name (``@workflow.defn`` without ``name=``).
    wanted = {w.__name__ for w in WORKFLOWS}
    assert wanted <= recorded, f"no recorded history of {sorted(wanted - recorded)}"
