"""Replay the recorded histories of the dispatch paths (batched grants, a chain's slot hand-off):
a change to the run or the semaphore that would break such executions fails here. Record with
``python -m tests.ci_dispatch.record_histories`` (it never overwrites a file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from tests.ci_core.test_ci_replay import WORKFLOWS, load
from workflows.ci.run import (
    PATCH_BATCHED_SLOT_SIGNALS,
    PATCH_EAGER_HANDOFF,
    PATCH_PACED_SNAPSHOTS,
    PATCH_PREGRANTED_ATTEMPTS,
    PATCH_RUN_SLOT_QUEUE,
    PATCH_SILENT_HANDOFF,
    PATCH_SLOT_HANDOFF,
    PATCH_SPARE_TO_WAITING,
)
from workflows.ci.semaphore import (
    PATCH_BATCH_GRANTS,
    PATCH_GRANTS_PER_RUN,
    SIGNAL_ACQUIRE_MANY,
    SIGNAL_GRANTED_MANY,
    SIGNAL_RELEASE,
    SIGNAL_TRANSFER,
)
from workflows.ci.types.job import ACTIVITY_RUN_JOB, SIGNAL_ATTEMPT_RUNNING

HISTORIES = Path(__file__).parent / "histories"
RECORDED = sorted(HISTORIES.glob("*.json"))


def patches(path: Path) -> set[str]:
    found = set()
    for e in load(path).events:
        if e.HasField("marker_recorded_event_attributes"):
            for payload in e.marker_recorded_event_attributes.details["patch-data"].payloads:
                found.add(json.loads(payload.data)["id"])
    return found


def signals(path: Path) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in load(path).events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]


def sent(path: Path) -> list[str]:
    return [
        e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        for e in load(path).events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
    ]


def test_the_recordings_exercise_the_new_paths() -> None:
    assert {p.stem for p in RECORDED} == {
        "run-capped_chain",
        "semaphore-chain_handoff",
        "run-capped_chain_batched",
        "semaphore-batched_signals",
        "run-capped_chain_eager",
        "semaphore-eager_handoff",
        "run-spare_to_waiting",
        "semaphore-spare_to_waiting",
        "run-capped_chain_silent",
        "semaphore-silent_handoff",
        "run-slot_queue",
        "semaphore-slot_queue",
    }
    # Before the batched signals: hand-off and batched grants, one grant signal per key.
    assert PATCH_SLOT_HANDOFF in patches(HISTORIES / "run-capped_chain.json")
    assert PATCH_BATCHED_SLOT_SIGNALS not in patches(HISTORIES / "run-capped_chain.json")
    assert PATCH_BATCH_GRANTS in patches(HISTORIES / "semaphore-chain_handoff.json")
    assert signals(HISTORIES / "semaphore-chain_handoff.json").count(SIGNAL_TRANSFER) == 2
    # With them: one acquire for the first pass's two jobs, one grant signal for both.
    run = HISTORIES / "run-capped_chain_batched.json"
    assert {PATCH_SLOT_HANDOFF, PATCH_BATCHED_SLOT_SIGNALS} <= patches(run)
    assert sent(run).count(SIGNAL_ACQUIRE_MANY) == 1 and sent(run).count(SIGNAL_TRANSFER) == 2, sent(run)
    assert signals(run).count(SIGNAL_GRANTED_MANY) == 1, signals(run)
    assert PATCH_EAGER_HANDOFF not in patches(run)
    semaphore = HISTORIES / "semaphore-batched_signals.json"
    assert {PATCH_BATCH_GRANTS, PATCH_GRANTS_PER_RUN} <= patches(semaphore)
    # The eager hand-off: each transfer sent in the task that schedules the next job.
    eager = HISTORIES / "run-capped_chain_eager.json"
    assert {PATCH_SLOT_HANDOFF, PATCH_BATCHED_SLOT_SIGNALS, PATCH_EAGER_HANDOFF} <= patches(eager)
    assert sent(eager).count(SIGNAL_TRANSFER) == 2, sent(eager)
    events = load(eager).events
    transfer_tasks = {
        e.signal_external_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id
        for e in events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
        and e.signal_external_workflow_execution_initiated_event_attributes.signal_name == SIGNAL_TRANSFER
    }
    job_tasks = {
        e.activity_task_scheduled_event_attributes.workflow_task_completed_event_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_RUN_JOB
    }
    assert transfer_tasks <= job_tasks, (transfer_tasks, job_tasks)
    assert signals(HISTORIES / "semaphore-eager_handoff.json").count(SIGNAL_TRANSFER) == 2
    # Three jobs under a cap of one: one grant, then the slot handed on to the two that waited;
    # the read-model writes paced.
    spare = HISTORIES / "run-spare_to_waiting.json"
    assert {PATCH_SPARE_TO_WAITING, PATCH_PACED_SNAPSHOTS} <= patches(spare)
    assert sent(spare).count(SIGNAL_ACQUIRE_MANY) == 1 and sent(spare).count(SIGNAL_TRANSFER) == 2, sent(spare)
    assert signals(spare).count(SIGNAL_GRANTED_MANY) == 1, signals(spare)
    assert signals(HISTORIES / "semaphore-spare_to_waiting.json").count(SIGNAL_TRANSFER) == 2 + 2
    # Attempts granted with their activities (no Update; the long job reported its start), and
    # the chain's slot handed on with no signal: the run sends its one acquire and two releases.
    silent = HISTORIES / "run-capped_chain_silent.json"
    assert {PATCH_PREGRANTED_ATTEMPTS, PATCH_SILENT_HANDOFF, PATCH_SLOT_HANDOFF} <= patches(silent)
    assert not [e for e in load(silent).events if e.HasField("workflow_execution_update_accepted_event_attributes")]
    assert signals(silent).count(SIGNAL_ATTEMPT_RUNNING) == 1, signals(silent)
    assert sorted(sent(silent)) == [SIGNAL_ACQUIRE_MANY, SIGNAL_RELEASE, SIGNAL_RELEASE], sent(silent)
    assert SIGNAL_TRANSFER not in signals(HISTORIES / "semaphore-silent_handoff.json")
    # Three jobs under a cap of one, with the run's own slot queue: one request, one grant, the
    # slot taken in turn by the two that waited in the run, one release; no transfer.
    queue = HISTORIES / "run-slot_queue.json"
    assert {PATCH_RUN_SLOT_QUEUE, PATCH_SLOT_HANDOFF, PATCH_PREGRANTED_ATTEMPTS} <= patches(queue)
    assert sent(queue) == [SIGNAL_ACQUIRE_MANY, SIGNAL_RELEASE], sent(queue)
    assert signals(queue) == [SIGNAL_GRANTED_MANY], signals(queue)
    assert SIGNAL_TRANSFER not in signals(HISTORIES / "semaphore-slot_queue.json")


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_dispatch_history_replays(path: Path) -> None:
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        # Inside the SDK's sandbox: the determinism guard production runs without.
        workflow_runner=SandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"
