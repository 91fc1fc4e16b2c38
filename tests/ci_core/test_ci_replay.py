"""Replay the CI workflow histories recorded by this build: a change that would break running
pushes, runs, tenant semaphores or reconciler passes fails here unless it comes with a new build
id (``docs/versioning.md``). Record with ``python -m tests.ci_core.record_histories`` (it never
overwrites a file)."""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from temporalio.api.common.v1 import Payloads
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.ci.job import CIJobActivities
from activities.ci.listing import CIListingActivities
from activities.ci.probe import CIProbeActivities
from activities.ci.projection import CIProjectionActivities
from activities.ci.reconcile import CIReconcileActivities
from activities.ci.schedules import CIScheduleActivities
from activities.ci.status_report import StatusReportActivities
from tests.history_builds import check_recorded_by_this_build, every_build, replay_failure, replayed, this_build
from workflows.ci.concurrency import CIConcurrencyGroupWorkflow
from workflows.ci.push import CIPushWorkflow
from workflows.ci.reconcile import CIReconcileWorkflow
from workflows.ci.run import CIRunWorkflow
from workflows.ci.semaphore import CITenantSemaphoreWorkflow

HISTORIES = Path(__file__).parent / "histories"
WORKFLOWS = [CIPushWorkflow, CIRunWorkflow, CITenantSemaphoreWorkflow, CIConcurrencyGroupWorkflow, CIReconcileWorkflow]
RECORDED = this_build(HISTORIES)
REPLAYED = replayed(HISTORIES)
# Those of earlier builds still draining too: their inputs must decode in today's types.
DECODED = every_build(HISTORIES)
# Activity names as histories hold them -> the activity that serves each today. A task scheduled
# by an older build may still be picked up by a worker running this code (activity routing is
# unversioned).
ACTIVITIES: dict[str, Callable[..., Any]] = {
    "ci_run_job": CIJobActivities.run_job,
    "ci_list_workflows": CIListingActivities.list_workflows,
    "ci_reconcile_list_repos": CIReconcileActivities.list_repos,
    "ci_reconcile_repo": CIReconcileActivities.reconcile_repo,
    "ci_project_run": CIProjectionActivities.project_ci_run,
    "ci_project_push": CIProjectionActivities.project_ci_push,
    "ci_served_queues": CIProbeActivities.served_queues,
    "ci_sync_schedules": CIScheduleActivities.sync_schedules,
    "ci_report_status": StatusReportActivities.report_status,
}


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"ci-{path.stem}", path.read_text())


def test_the_histories_are_this_builds() -> None:
    check_recorded_by_this_build(HISTORIES, load)


def workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


@pytest.mark.parametrize("path", REPLAYED, ids=[f"{p.parent.name}/{p.stem}" for p in REPLAYED])
async def test_recorded_history_replays(path: Path) -> None:
    failure = await replay_failure(WORKFLOWS, load(path))
    assert failure is None, f"{path.name}: {failure!r}"


def test_every_ci_workflow_has_a_recorded_history() -> None:
    recorded = {workflow_type(load(p)) for p in RECORDED}
    # Each is registered under its class name (``@workflow.defn`` without ``name=``).
    wanted = {w.__name__ for w in WORKFLOWS}
    assert wanted <= recorded, f"no recorded history of {sorted(wanted - recorded)}"


def input_type(fn: Callable[..., Any]) -> type:
    """The one typed input of a workflow's run method or an activity method."""
    hints = get_type_hints(fn)
    (name,) = [p for p in inspect.signature(fn).parameters if p != "self"]
    return hints[name]  # type: ignore[no-any-return]


def leaves(value: object) -> Iterator[object]:
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
    elif value is not None:
        yield value


def assert_decodes_keeping_every_value(payloads: Payloads, into: type, where: str) -> None:
    """Today's type reads the old payload, and no value in it is dropped on the way (pydantic
    ignores unknown fields: a field that moved without a migration would vanish silently)."""
    (payload,) = payloads.payloads
    (decoded,) = pydantic_data_converter.payload_converter.from_payloads([payload], [into])
    # Counted, so a value dropped in one place is missed even when it also appears in another.
    dropped = Counter(leaves(json.loads(payload.data))) - Counter(leaves(decoded.model_dump(mode="json")))
    assert not dropped, f"{where}: {into.__name__} dropped {sorted(map(repr, dropped))}"


@pytest.mark.parametrize("path", DECODED, ids=[f"{p.parent.name}/{p.stem}" for p in DECODED])
def test_recorded_inputs_decode_into_todays_types(path: Path) -> None:
    """Replay decodes what a workflow receives, but not the inputs it sent to activities; both
    must survive a payload change, as must the workflow's own start input."""
    history = load(path)
    runs = {w.__name__: w.run for w in WORKFLOWS}  # type: ignore[attr-defined]
    started = history.events[0].workflow_execution_started_event_attributes
    where = f"{path.name} start"
    assert_decodes_keeping_every_value(started.input, input_type(runs[workflow_type(history)]), where)
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            activity = ACTIVITIES[scheduled.activity_type.name]
            where = f"{path.name} event {event.event_id}"
            assert_decodes_keeping_every_value(scheduled.input, input_type(activity), where)
